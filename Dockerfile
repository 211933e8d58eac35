# tpud container image: build on Debian 12, run on Debian 12 slim with only the runtime libraries.
#
#   docker build -t tpud .                     (or: podman build --format docker -t tpud .)
#   docker run -p 8500:8500 -p 8501:8501 tpud  serves the bundled example models
#   docker run -v /srv/models:/models:ro ...   serves your own repository instead
#   docker run -v ./config.json:/etc/tpud/config.json:ro ... tpud   uses your options
#
# Configuration: tpud always starts with `--config /etc/tpud/config.json`. The image's file
# (deploy/container/config.json) serves /models on 0.0.0.0:8500 (native) and :8501 (HTTP); mount
# your own file over it to change options, or put flags after the image name (`docker run tpud
# --threads 4`, `docker run tpud --help`): flags win over the file. The default command passes
# `--listen 0.0.0.0` explicitly, because tpud binds 127.0.0.1 unless told otherwise, which inside
# a container nobody could reach. Keep the HTTP port at 8501 in the container: HEALTHCHECK and
# the deploy/ manifests probe it there (publish it on any host port you like).
# HEALTHCHECK needs the Docker image format: with podman or buildah, build with --format docker.

ARG DEBIAN=bookworm

FROM debian:${DEBIAN} AS build
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update -q \
 && apt-get install -y -q --no-install-recommends \
      cmake make gcc libc6-dev pkg-config \
      libevent-dev libprotobuf-c-dev protobuf-c-compiler libssl-dev libjansson-dev libnghttp2-dev \
      zlib1g-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY CMakeLists.txt ./
COPY engine engine
COPY proto proto
COPY server server
COPY client client
# No tests in the image build: `make test` runs them (CUnit is not installed here).
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF \
 && cmake --build /build -j "$(nproc)" --target tpud tpuctl tpubench \
 && strip /build/server/tpud /build/client/tpuctl /build/client/tpubench

FROM debian:${DEBIAN}-slim AS runtime
ARG DEBIAN_FRONTEND=noninteractive
# Runtime libraries only; curl is the HEALTHCHECK's client.
RUN apt-get update -q \
 && apt-get install -y -q --no-install-recommends \
      libevent-2.1-7 libevent-pthreads-2.1-7 \
      libprotobuf-c1 libjansson4 libssl3 libnghttp2-14 zlib1g curl ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 tpud \
 && useradd --system --uid 10001 --gid tpud --home-dir /var/lib/tpud --no-create-home \
      --shell /usr/sbin/nologin tpud \
 && mkdir -p /var/lib/tpud /var/log/tpud \
 && chown tpud:tpud /var/lib/tpud /var/log/tpud
COPY deploy/container/config.json /etc/tpud/config.json
COPY --from=build /build/server/tpud /build/client/tpuctl /build/client/tpubench /usr/local/bin/
# Bundled examples: the default content of the /models volume (a named volume starts as a copy
# of them; a bind mount replaces them).
COPY --chown=root:root models/digits /models/digits
COPY --chown=root:root models/matmul /models/matmul
VOLUME ["/models"]
# Audit logs go here when --audit-log is given (e.g. /var/log/tpud/audit.log).
VOLUME ["/var/log/tpud"]

USER 10001:10001
WORKDIR /var/lib/tpud
EXPOSE 8500 8501
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD curl -fsS -o /dev/null http://127.0.0.1:8501/v2/health/ready || exit 1
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/tpud", "--config", "/etc/tpud/config.json"]
CMD ["--listen", "0.0.0.0"]
