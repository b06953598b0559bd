// Package image builds eipd's container image without a container engine,
// with github.com/google/go-containerregistry: an OCI image index holding one
// scratch image per platform, each a single layer with the static binary at
// /eipd, written as an OCI image layout in a tar file (what `docker buildx
// --output type=oci`, `skopeo copy oci-archive:` and `ctr image import`
// read and write).
//
// The output is reproducible: file times and the config's creation time come
// from Options.Created, so the same binaries and options give the same
// digests. Verify reads an archive back the way a runtime would and checks
// each platform's entrypoint, architecture and binary.
package image
