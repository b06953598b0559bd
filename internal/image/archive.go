package image

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// Annotations of the index's entry in the layout's index.json, as docker
// buildx writes them: containerd (`ctr image import`) names the image after
// the first, skopeo and podman (`oci-archive:FILE:TAG`) find it by the second.
const (
	annotationImageName = "io.containerd.image.name"
	annotationRefName   = "org.opencontainers.image.ref.name"
)

// WriteArchive writes idx as an OCI image layout tarball at path, naming it
// name:tag (name as in ghcr.io/eip-project/eipd). The file is replaced
// atomically; the archive's own entries have a fixed time and owner, so the
// same index always gives the same bytes.
func WriteArchive(path string, idx v1.ImageIndex, name, tag string) error {
	dir, err := os.MkdirTemp("", "eipd-image-")
	if err != nil {
		return fmt.Errorf("write image %s: %w", path, err)
	}
	defer os.RemoveAll(dir)
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("write image %s: %w", path, err)
	}
	err = lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		annotationImageName: name + ":" + tag,
		annotationRefName:   tag,
	}))
	if err != nil {
		return fmt.Errorf("write image %s: %w", path, err)
	}
	if err := tarDir(dir, path); err != nil {
		return fmt.Errorf("write image %s: %w", path, err)
	}
	return nil
}

// tarDir writes the files under dir into a new tar file at path, in
// lexical order (filepath.WalkDir's), with fixed metadata.
func tarDir(dir, path string) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp-")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	// CreateTemp's 0600 would keep the image from other users of the machine.
	if err := tmp.Chmod(0o644); err != nil {
		return err
	}
	tw := tar.NewWriter(tmp)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: filepath.ToSlash(rel), ModTime: time.Unix(0, 0).UTC()}
		if d.IsDir() {
			hdr.Typeflag, hdr.Name, hdr.Mode = tar.TypeDir, hdr.Name+"/", 0o755
			return tw.WriteHeader(hdr)
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return err
		}
		hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeReg, 0o644, st.Size()
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// Open extracts the archive at path into dir, which must exist and be
// empty, and returns the image index it names, with the index.json
// annotations of its entry.
func Open(path, dir string) (v1.ImageIndex, map[string]string, error) {
	if err := untar(path, dir); err != nil {
		return nil, nil, fmt.Errorf("open image %s: %w", path, err)
	}
	root, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("open image %s: %w", path, err)
	}
	m, err := root.IndexManifest()
	if err != nil {
		return nil, nil, fmt.Errorf("open image %s: %w", path, err)
	}
	if len(m.Manifests) != 1 || !m.Manifests[0].MediaType.IsIndex() {
		return nil, nil, fmt.Errorf("open image %s: index.json must name exactly one image index, names %d entries", path, len(m.Manifests))
	}
	idx, err := root.ImageIndex(m.Manifests[0].Digest)
	if err != nil {
		return nil, nil, fmt.Errorf("open image %s: %w", path, err)
	}
	return idx, m.Manifests[0].Annotations, nil
}

func untar(path, dir string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.FromSlash(strings.TrimSuffix(hdr.Name, "/"))
		if !filepath.IsLocal(name) {
			return fmt.Errorf("entry %q leaves the archive", hdr.Name)
		}
		dst := filepath.Join(dir, name)
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := writeFile(dst, tr); err != nil {
				return err
			}
		default:
			return fmt.Errorf("entry %q: unexpected type %q", hdr.Name, hdr.Typeflag)
		}
	}
}

func writeFile(dst string, r io.Reader) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
