#!/usr/bin/env bash
# Builds kube-apiserver, kubectl and etcd for the test environment from the Go
# module in testenv/k8s (never downloads binaries). The output directory is
# keyed by the Kubernetes version and a hash of testenv/k8s/go.mod + go.sum, so
# a second run is a no-op. The last line printed is the bin directory.
#
# Environment: EIP_CACHE (default $HOME/.cache/eip) is the cache root.
set -euo pipefail

K8S_VERSION=v1.37.2
K8S_MINOR=37

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mod="$root/testenv/k8s"
cache="${EIP_CACHE:-$HOME/.cache/eip}"
# The same key as testenv.DefaultK8sBinDir computes.
hash=$(cat "$mod/go.mod" "$mod/go.sum" "$mod/cmd/etcd/main.go" | sha256sum | cut -c1-12)
bin="$cache/k8s-$K8S_VERSION-$hash/bin"

if [[ -x "$bin/kube-apiserver" && -x "$bin/kubectl" && -x "$bin/etcd" ]]; then
	echo "$bin"
	exit 0
fi

mkdir -p "$bin"
tmp=$(mktemp -d "$bin/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$K8S_MINOR"
	ldflags+=" -X $pkg.gitTreeState=clean"
done

start=$(date +%s)
cd "$mod"
echo "building kube-apiserver, kubectl, etcd ($K8S_VERSION) into $bin" >&2
CGO_ENABLED=0 GOFLAGS="-mod=mod -buildvcs=false" go build -trimpath -ldflags "-s -w $ldflags" -o "$tmp/" \
	k8s.io/kubernetes/cmd/kube-apiserver \
	k8s.io/kubernetes/cmd/kubectl \
	./cmd/etcd
# Move into place only once all three exist, so an interrupted build is redone.
mv "$tmp/kube-apiserver" "$tmp/kubectl" "$tmp/etcd" "$bin/"
echo "built in $(($(date +%s) - start)) s" >&2
echo "$bin"
