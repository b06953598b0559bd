# syntax=docker/dockerfile:1
# eipd's image for people who build with Docker or BuildKit:
#   docker buildx build --platform linux/amd64,linux/arm64 \
#     --build-arg VERSION=$(git describe --tags --always) -t REGISTRY/eipd:TAG .
# `make image` builds the same image without a container engine (scripts/image.sh);
# this file is not exercised by the test suite.

FROM --platform=$BUILDPLATFORM golang:1.26 AS build
ARG TARGETOS TARGETARCH
ARG VERSION=dev
WORKDIR /src
# Modules only as go.sum pins them.
ENV GOFLAGS=-mod=readonly
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -mod=readonly -trimpath -tags grpcnotrace -ldflags "-s -w -X main.version=${VERSION}" -o /out/eipd ./daemon

FROM scratch
ARG VERSION=dev
LABEL org.opencontainers.image.title="eipd" \
      org.opencontainers.image.description="eip node daemon: external IPs for bare-metal Kubernetes" \
      org.opencontainers.image.source="https://github.com/eip-project/eip" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build --chmod=0555 /out/eipd /eipd
# Root, because eipd needs NET_ADMIN and NET_RAW in effect; the DaemonSet
# drops every other capability (docs/operating.md).
USER 0:0
EXPOSE 9402/tcp
ENTRYPOINT ["/eipd"]
