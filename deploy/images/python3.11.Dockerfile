# Runtime image of python3.11 functions: CPython 3.11, pip (builds install
# requirements.txt) and the `sless` binary with the shims embedded in it,
# which pods run as `sless instance` and build Jobs as `sless instance
# build`. Built by deploy/images/build.sh from a release binary; tagged
# `{sless version}-{shim digest}`, never `latest`.
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3.11 python3-pip ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && ln -sf /usr/bin/python3.11 /usr/local/bin/python3.11
COPY sless /usr/local/bin/sless
# 65532: the uid of the pods' restricted security context.
USER 65532:65532
ENV SLESS_PYTHON=/usr/bin/python3.11
ENTRYPOINT ["/usr/local/bin/sless"]
