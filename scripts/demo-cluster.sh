#!/usr/bin/env bash
# make demo-cluster: eip installed as users install it, on real kubelet
# nodes in network namespaces (testenv/cmd/demo-cluster). Builds what it
# needs first, from Go modules and cached: the control plane, kubelet and
# friends, containerd, the CNI plugins (about 45 min of CPU the first time),
# and eipd's image (make image).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
export GOFLAGS=${GOFLAGS:--mod=mod}
echo "==> building the cluster's binaries (cached after the first run)"
EIP_K8S_BIN=$(scripts/build-k8s.sh | tail -n1)
for tool in kubelet containerd cni; do scripts/build-tool.sh "$tool" >/dev/null; done
VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
EIPD_IMAGE="$root/bin/eipd-image-demo.tar"
echo "==> make image (linux/$(go env GOARCH), $VERSION)"
VERSION=$VERSION PLATFORMS="linux/$(go env GOARCH)" OUT="$EIPD_IMAGE" scripts/image.sh >/dev/null
export EIP_K8S_BIN EIPD_IMAGE VERSION
exec go run ./testenv/cmd/demo-cluster
