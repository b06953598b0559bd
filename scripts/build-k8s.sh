#!/usr/bin/env bash
# Builds kube-apiserver, kubectl and etcd for the test environment from the Go
# module in testenv/k8s (never downloads binaries). The output directory is
# keyed by the Kubernetes version and a hash of testenv/k8s/go.mod + go.sum, so
# a second run is a no-op. The last line printed is the bin directory.
#
# Environment: EIP_CACHE (default $HOME/.cache/eip) is the cache root.
# K8S_VERSION (default: testenv/k8s's, v1.37.2) builds another release, for
# `make test-k8s`: a copy of testenv/k8s under the cache requires it (its
# staging modules at v0.MINOR.PATCH) with etcd ETCD_VERSION (default
# v3.6.16, etcd's release of the Kubernetes minors before 1.37), and
# `go mod tidy` completes its go.sum from the module proxy.
set -euo pipefail

default=v1.37.2
K8S_VERSION=${K8S_VERSION:-$default}
[[ $K8S_VERSION =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] || { echo "build-k8s.sh: K8S_VERSION=$K8S_VERSION is not v1.MINOR.PATCH" >&2; exit 2; }
K8S_MINOR=${BASH_REMATCH[1]}
staging=v0.$K8S_MINOR.${BASH_REMATCH[2]}

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mod="$root/testenv/k8s"
cache="${EIP_CACHE:-$HOME/.cache/eip}"
if [[ $K8S_VERSION != "$default" ]]; then
	etcd=${ETCD_VERSION:-v3.6.16}
	other="$cache/k8s-module-$K8S_VERSION-$etcd"
	if [[ ! -f "$other/go.sum.done" ]]; then
		rm -rf "$other" && mkdir -p "$other/cmd"
		cp "$mod/tools.go" "$other/" && cp -r "$mod/cmd/etcd" "$other/cmd/"
		# Every k8s.io module pinned at this release goes to the other one;
		# the indirect requirements are tidy's to find again.
		sed -e "s#^\(\s*\)k8s.io/kubernetes v1\.[0-9.]*#\1k8s.io/kubernetes $K8S_VERSION#" \
			-e "s#=> \(k8s.io/[a-z0-9-]*\) v0\.[0-9]*\.[0-9]*#=> \1 $staging#" \
			-e "s#^\(\s*go.etcd.io/etcd/server/v3\) v3[0-9.]*#\1 $etcd#" \
			-e '/\/\/ indirect$/d' \
			"$mod/go.mod" >"$other/go.mod"
		(cd "$other" && echo "resolving $K8S_VERSION's modules in $other" >&2 && GOFLAGS=-mod=mod go mod tidy >&2)
		touch "$other/go.sum.done"
	fi
	mod=$other
fi
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
