#!/usr/bin/env bash
# Builds eipd's container image without a container engine: static eipd
# binaries for each platform, then an OCI image index (scratch + /eipd) in an
# OCI layout tarball, verified after writing. Called by `make image`.
#
# Environment:
#   VERSION    eipd version and image tag (default: the VERSION file)
#   IMAGE      image name without tag (default ghcr.io/eip-project/eipd)
#   PLATFORMS  space-separated os/arch list (default "linux/amd64 linux/arm64")
#   OUT        archive path (default bin/eipd-image.tar)
#   SOURCE_DATE_EPOCH  image creation time (default: the last commit's time)
#   DIGEST_FILE  where to write the image index's digest (sha256:...), if set
#
# Load or push the result with any OCI tool, for example:
#   skopeo copy --all oci-archive:bin/eipd-image.tar docker://REGISTRY/eipd:TAG
#   ctr -n k8s.io image import --all-platforms bin/eipd-image.tar
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
# -mod=readonly on each go command: modules only as go.sum pins them.
export CGO_ENABLED=0

VERSION=${VERSION:-$(cat VERSION)}
IMAGE=${IMAGE:-ghcr.io/eip-project/eipd}
PLATFORMS=${PLATFORMS:-linux/amd64 linux/arm64}
OUT=${OUT:-bin/eipd-image.tar}
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
revision=$(git rev-parse HEAD 2>/dev/null || true)
commit=${revision:0:12}
export SOURCE_DATE_EPOCH

mkdir -p bin/image "$(dirname "$OUT")"
args=()
for p in $PLATFORMS; do
	os=${p%/*} arch=${p#*/}
	bin="bin/image/eipd-$os-$arch"
	echo "building eipd $VERSION for $p" >&2
	# grpcnotrace: see EIPD_TAGS in the Makefile.
	GOOS=$os GOARCH=$arch go build -mod=readonly -trimpath -tags grpcnotrace -ldflags "-s -w -X main.version=$VERSION -X main.commit=${commit:-unknown}" -o "$bin" ./daemon
	args+=(--binary "$p=$bin")
done
go run -mod=readonly ./scripts/image --out "$OUT" --name "$IMAGE" --version "$VERSION" --revision "$revision" --digest-file "${DIGEST_FILE:-}" "${args[@]}"
