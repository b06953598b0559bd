package image

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Binary is the eipd executable's path inside the image, and its entrypoint.
const Binary = "/eipd"

// User is the image's user: root, because eipd needs NET_ADMIN and NET_RAW
// in effect and container runtimes make added capabilities effective only
// for user 0. The DaemonSet drops every other capability.
const User = "0:0"

// MetricsPort is the port eipd's --metrics-addr listens on by default.
const MetricsPort = "9402/tcp"

// Options describe the image to build.
type Options struct {
	// Binaries maps a platform ("linux/amd64") to the path of a static eipd
	// built for it.
	Binaries map[string]string
	// Version is eipd's version, as stamped into the binary.
	Version string
	// Revision is the source commit, if known.
	Revision string
	// Source is the repository URL.
	Source string
	// Created is the image's creation time and every file's modification
	// time; a fixed value (the commit time) makes builds reproducible.
	Created time.Time
	// Title, Description and Path describe another single-binary image
	// built the same way (the test environment's pause and web images):
	// its title label, description label, and the binary's path inside the
	// image, also the entrypoint. Empty means eipd's: "eipd", its
	// description and Binary.
	Title, Description, Path string
}

func (o Options) path() string {
	if o.Path == "" {
		return Binary
	}
	return o.Path
}

// Labels returns the image config labels (org.opencontainers.image.*), also
// used as the manifests' and the index's annotations.
func (o Options) Labels() map[string]string {
	title, desc := o.Title, o.Description
	if title == "" {
		title, desc = "eipd", "eip node daemon: external IPs for bare-metal Kubernetes"
	}
	l := map[string]string{
		"org.opencontainers.image.title":       title,
		"org.opencontainers.image.description": desc,
		"org.opencontainers.image.source":      o.Source,
		"org.opencontainers.image.version":     o.Version,
		"org.opencontainers.image.licenses":    "Apache-2.0",
		"org.opencontainers.image.created":     o.Created.UTC().Format(time.RFC3339),
	}
	if o.Revision != "" {
		l["org.opencontainers.image.revision"] = o.Revision
	}
	return l
}

// Build returns the OCI image index of o.Binaries, platforms in sorted order.
func Build(o Options) (v1.ImageIndex, error) {
	if len(o.Binaries) == 0 {
		return nil, errors.New("build image: no binaries")
	}
	if o.Version == "" || o.Source == "" || o.Created.IsZero() {
		return nil, errors.New("build image: version, source and creation time are required")
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, name := range slices.Sorted(maps.Keys(o.Binaries)) {
		p, err := v1.ParsePlatform(name)
		if err != nil {
			return nil, fmt.Errorf("build image for %s: %w", name, err)
		}
		img, err := platformImage(o, *p, o.Binaries[name])
		if err != nil {
			return nil, fmt.Errorf("build image for %s: %w", name, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: p, Annotations: o.Labels()},
		})
	}
	withAnn, ok := mutate.Annotations(idx, o.Labels()).(v1.ImageIndex)
	if !ok {
		return nil, errors.New("build image: annotated index is not an index")
	}
	return withAnn, nil
}

func platformImage(o Options, p v1.Platform, binary string) (v1.Image, error) {
	layerTar, err := binaryLayer(binary, o.path(), o.Created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("layer of %s: %w", binary, err)
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Author:    "eip",
			Created:   v1.Time{Time: o.Created},
			CreatedBy: "COPY " + o.Labels()["org.opencontainers.image.title"] + " " + o.path(),
		},
	})
	if err != nil {
		return nil, fmt.Errorf("append layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant, cf.OSVersion = p.OS, p.Architecture, p.Variant, p.OSVersion
	cf.Author = "eip"
	cf.Created = v1.Time{Time: o.Created}
	cf.Config = v1.Config{
		Entrypoint:   []string{o.path()},
		User:         User,
		WorkingDir:   "/",
		Labels:       o.Labels(),
		ExposedPorts: map[string]struct{}{MetricsPort: {}},
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	withAnn, ok := mutate.Annotations(img, o.Labels()).(v1.Image)
	if !ok {
		return nil, errors.New("annotated image is not an image")
	}
	return withAnn, nil
}

// binaryLayer returns an uncompressed tar holding path as inImage, owned by
// root, mode 0555.
func binaryLayer(path, inImage string, mtime time.Time) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read binary: %w", err)
	}
	if len(b) == 0 {
		return nil, fmt.Errorf("read binary %s: empty file", path)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := &tar.Header{
		Typeflag: tar.TypeReg,
		Name:     strings.TrimPrefix(inImage, "/"),
		Mode:     0o555,
		Size:     int64(len(b)),
		ModTime:  mtime.UTC().Truncate(time.Second),
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return nil, fmt.Errorf("layer tar: %w", err)
	}
	if _, err := tw.Write(b); err != nil {
		return nil, fmt.Errorf("layer tar: %w", err)
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("layer tar: %w", err)
	}
	return buf.Bytes(), nil
}
