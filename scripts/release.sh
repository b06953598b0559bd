#!/usr/bin/env bash
# Builds the kubectl-eip release: one archive per platform (linux and
# darwin, amd64 and arm64) holding kubectl-eip, kubectl_complete-eip and
# LICENSE, their SHA256SUMS, and the krew manifest eip.yaml filled in from
# plugins/eip.yaml with the version and each archive's sha256.
#
# Environment: VERSION, a semantic version such as v0.1.0 (default: the
# VERSION file; krew needs a semantic version: anything else, e.g. git
# describe's 5e7ffc2-dirty, becomes v0.0.0-g5e7ffc2-dirty); OUT, the output
# directory (default bin/release).
# The archives are reproducible: the same commit, version and Go give the
# same bytes. Builds take modules only as go.sum pins them (-mod=readonly).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
version=${VERSION:-$(cat VERSION)}
semver='^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$'
if [[ ! $version =~ $semver ]]; then
	version=v0.0.0-g${version#v}
	[[ $version =~ $semver ]] || { echo "release: VERSION=${VERSION:-} is no semantic version (like v0.1.0)" >&2; exit 2; }
fi
out=${OUT:-$root/bin/release}
mkdir -p "$out"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
# Every file in the archives gets the commit's time, owner root.
mtime=$(git log -1 --format=%ct 2>/dev/null || echo 0)
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)

fill=(-e "s/\${VERSION}/$version/g")
for platform in linux/amd64 linux/arm64 darwin/amd64 darwin/arm64; do
	os=${platform%/*} arch=${platform#*/}
	dir="$stage/${os}_$arch"
	mkdir -p "$dir"
	GOOS=$os GOARCH=$arch CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags "-s -w -X main.version=$version -X main.commit=$commit" \
		-o "$dir/kubectl-eip" ./kubectl-eip
	install -m 0755 kubectl-eip/kubectl_complete-eip "$dir/"
	install -m 0644 LICENSE "$dir/"
	archive="kubectl-eip_${os}_$arch.tar.gz"
	tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$mtime" \
		-C "$dir" -c kubectl-eip kubectl_complete-eip LICENSE | gzip -n -9 >"$out/$archive"
	sum=$(sha256sum "$out/$archive" | cut -d' ' -f1)
	fill+=(-e "s/\${SHA256_${os}_$arch}/$sum/")
	echo "$archive $sum"
done
(cd "$out" && sha256sum kubectl-eip_*.tar.gz >SHA256SUMS)
sed "${fill[@]}" plugins/eip.yaml >"$out/eip.yaml"
if grep -n '\${' "$out/eip.yaml" >&2; then
	echo "release: plugins/eip.yaml has a placeholder release.sh does not fill" >&2
	exit 1
fi
echo "krew manifest for $version: $out/eip.yaml"
