#!/usr/bin/env bash
# Builds a release of eip into one folder (`make release VERSION=v0.1.0`):
#
#   eipd-image.tar              eipd's multi-arch OCI image archive, tagged VERSION
#   eip.yaml                    the install manifest: manifests/ with eipd's
#                               image pinned by tag and digest
#   eip-X.Y.Z.tgz               the Helm chart: version X.Y.Z, appVersion
#                               VERSION, the image digest pinned; push it with
#                               `helm push eip-X.Y.Z.tgz oci://REGISTRY/charts`
#   kubectl-eip_OS_ARCH.tar.gz  the plugin (kubectl-eip, kubectl_complete-eip,
#                               LICENSE) for linux and darwin, amd64 and arm64
#   krew/eip.yaml               the krew manifest, with each archive's sha256
#                               (krew wants it named after the plugin, and
#                               eip.yaml here is the install manifest)
#   *.spdx.json                 an SPDX SBOM of every binary released: eipd
#                               per image platform, kubectl-eip per archive
#   SHA256SUMS                  the sha256 of every other file
#
# Environment: VERSION, a semantic version such as v0.1.0 (default: the
# VERSION file; anything else, e.g. git describe's 5e7ffc2-dirty, becomes
# v0.0.0-g5e7ffc2-dirty); OUT, the folder (default bin/release, always
# replaced): it is replaced when it holds a release, refused when it holds
# anything else;
# HELM, the helm command (default: scripts/build-tool.sh helm builds it).
# The same commit, version and Go give the same bytes. Builds take modules
# only as go.sum pins them (-mod=readonly), and nothing needs the network
# beyond the module cache.
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
if [[ -n ${OUT:-} && -e $out && ! -e $out/SHA256SUMS && -n $(ls -A "$out") ]]; then
	echo "release: OUT=$out holds files but no release (no SHA256SUMS): name an empty folder" >&2
	exit 2
fi
rm -rf "$out"
mkdir -p "$out"
out=$(cd "$out" && pwd)
helm=${HELM:-$(scripts/build-tool.sh helm | tail -n1)/helm}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
# Every file in the archives gets the commit's time, owner root.
mtime=$(git log -1 --format=%ct 2>/dev/null || echo 0)
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
export SOURCE_DATE_EPOCH=$mtime

# eipd's image, and its index digest for the manifest and the chart.
VERSION=$version OUT="$out/eipd-image.tar" DIGEST_FILE="$stage/digest" scripts/image.sh
digest=$(cat "$stage/digest")
image="ghcr.io/eip-project/eipd:$version@$digest"
for bin in bin/image/eipd-linux-*; do
	go run -mod=readonly ./scripts/release sbom -version "$version" -out "$out/$(basename "$bin").spdx.json" "$bin"
done

go run -mod=readonly ./scripts/release manifest -image "$image" -out "$out/eip.yaml"

# The chart: the repository's, with the release's version and digest.
cp -rL charts/eip "$stage/eip" # -L: the chart's files may link to manifests/
sed -i -e "s/^version: .*/version: ${version#v}/" -e "s/^appVersion: .*/appVersion: $version/" "$stage/eip/Chart.yaml"
sed -i "s/^  digest: \"\"$/  digest: \"$digest\"/" "$stage/eip/values.yaml"
grep -q "^  digest: \"$digest\"$" "$stage/eip/values.yaml" || { echo "release: charts/eip/values.yaml has no image digest line to fill" >&2; exit 1; }
"$helm" package "$stage/eip" --destination "$out" >/dev/null

# The plugin.
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
	go run -mod=readonly ./scripts/release sbom -version "$version" -out "$out/kubectl-eip_${os}_$arch.spdx.json" "$dir/kubectl-eip"
	sum=$(sha256sum "$out/$archive" | cut -d' ' -f1)
	fill+=(-e "s/\${SHA256_${os}_$arch}/$sum/")
done
mkdir -p "$out/krew"
sed "${fill[@]}" plugins/eip.yaml >"$out/krew/eip.yaml"
if grep -n '\${' "$out/krew/eip.yaml" >&2; then
	echo "release: plugins/eip.yaml has a placeholder release.sh does not fill" >&2
	exit 1
fi

(cd "$out" && find . -type f ! -name SHA256SUMS -printf '%P\n' | LC_ALL=C sort | xargs sha256sum >SHA256SUMS)
echo "eip $version ($image) in $out:"
(cd "$out" && find . -type f -printf '  %P  %s\n' | LC_ALL=C sort)
