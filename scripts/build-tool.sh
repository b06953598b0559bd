#!/usr/bin/env bash
# Builds a pinned Go tool for the tests from source and caches it.
#
#   scripts/build-tool.sh NAME
#
# testenv/tools/NAME/ is a small Go module that pins the tool:
#   go.mod, go.sum  the exact versions (go.sum must be complete: the build is
#                   -mod=readonly, so it never edits the tree)
#   tools.go        `//go:build tools`, blank-imports the packages to build
#   build.env       sourced by this script; sets
#                     PACKAGES  the main packages to build (required)
#                     LDFLAGS   extra -ldflags (optional; -s -w are always set)
#                     TAGS      build tags (optional)
#
# The binaries go to $EIP_CACHE/NAME-<hash>/bin (EIP_CACHE defaults to
# $HOME/.cache/eip), where <hash> covers every file of testenv/tools/NAME, so
# changing a version or a flag rebuilds and an unchanged tool is a no-op.
# The last line printed is the bin directory. testenv.ToolBinDir computes the
# same directory.
set -euo pipefail

name=${1:?usage: build-tool.sh NAME}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir="$root/testenv/tools/$name"
[[ -f "$dir/build.env" ]] || { echo "build-tool.sh: no $dir/build.env" >&2; exit 1; }
cache="${EIP_CACHE:-$HOME/.cache/eip}"

# The key: each top-level file's name and content, in byte order of names.
hash=$(cd "$dir" && for f in $(LC_ALL=C ls); do
	[[ -f "$f" ]] || continue
	printf '%s\n' "$f"
	cat "$f"
done | sha256sum | cut -c1-12)
bin="$cache/$name-$hash/bin"

PACKAGES="" LDFLAGS="" TAGS=""
# shellcheck source=/dev/null
source "$dir/build.env"
[[ -n "$PACKAGES" ]] || { echo "build-tool.sh: $dir/build.env sets no PACKAGES" >&2; exit 1; }

want=()
for p in $PACKAGES; do want+=("$(basename "$p")"); done
done=1
for b in "${want[@]}"; do [[ -x "$bin/$b" ]] || done=0; done
if ((done)); then
	echo "$bin"
	exit 0
fi

mkdir -p "$bin"
tmp=$(mktemp -d "$bin/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)
echo "building $name ($PACKAGES) into $bin" >&2
cd "$dir"
# shellcheck disable=SC2086 # PACKAGES is a list
CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false" go build -trimpath \
	-ldflags "-s -w $LDFLAGS" -tags "$TAGS" -o "$tmp/" $PACKAGES
# Move into place only once every binary exists, so an interrupted build is redone.
for b in "${want[@]}"; do mv "$tmp/$b" "$bin/"; done
echo "built $name in $(($(date +%s) - start)) s" >&2
echo "$bin"
