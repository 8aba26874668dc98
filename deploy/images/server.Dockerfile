# Image of `sless server` in the cluster shape (deploy/k8s): the binary
# alone; builds and functions run in the runtime images.
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY sless /usr/local/bin/sless
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/sless", "server"]
