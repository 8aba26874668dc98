# Runtime image of nodejs20 functions: Node.js 20 and npm (builds run
# `npm install --omit=dev`) and the `sless` binary with its embedded shims (see
# python3.11.Dockerfile). Tagged `{sless version}-{shim digest}`.
FROM node:20-bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY sless /usr/local/bin/sless
USER 65532:65532
ENV SLESS_NODE=/usr/local/bin/node SLESS_NPM=/usr/local/bin/npm
ENTRYPOINT ["/usr/local/bin/sless"]
