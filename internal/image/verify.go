package image

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Entry describes one platform's image in an index.
type Entry struct {
	Platform string
	Digest   v1.Hash
	// Size is what a node pulls: manifest, config and compressed layers.
	Size int64
	// BinarySize is the size of /eipd on disk.
	BinarySize int64
}

// elfMachine returns the ELF machine a binary for goarch declares.
func elfMachine(goarch string) (elf.Machine, bool) {
	switch goarch {
	case "amd64":
		return elf.EM_X86_64, true
	case "arm64":
		return elf.EM_AARCH64, true
	case "arm":
		return elf.EM_ARM, true
	case "ppc64le":
		return elf.EM_PPC64, true
	case "s390x":
		return elf.EM_S390, true
	case "riscv64":
		return elf.EM_RISCV, true
	}
	return elf.EM_NONE, false
}

// Verify checks that idx holds exactly the platforms want (as "os/arch"),
// each an image whose config names that platform and the entrypoint
// [/eipd], and whose file system holds /eipd: an executable ELF file for
// that architecture, statically linked. It returns one Entry per platform,
// in the index's order.
func Verify(idx v1.ImageIndex, want []string) ([]Entry, error) {
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("verify image: %w", err)
	}
	var entries []Entry
	var got []string
	var errs error
	for _, d := range m.Manifests {
		if d.Platform == nil {
			errs = errors.Join(errs, fmt.Errorf("verify image: manifest %s has no platform", d.Digest))
			continue
		}
		p := d.Platform.String()
		got = append(got, p)
		e, err := verifyImage(idx, d)
		if err != nil {
			errs = errors.Join(errs, fmt.Errorf("verify image for %s: %w", p, err))
			continue
		}
		entries = append(entries, e)
	}
	if !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))) {
		errs = errors.Join(errs, fmt.Errorf("verify image: platforms %v, want %v", got, want))
	}
	return entries, errs
}

func verifyImage(idx v1.ImageIndex, d v1.Descriptor) (Entry, error) {
	e := Entry{Platform: d.Platform.String(), Digest: d.Digest, Size: d.Size}
	img, err := idx.Image(d.Digest)
	if err != nil {
		return e, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return e, err
	}
	if cf.OS != d.Platform.OS || cf.Architecture != d.Platform.Architecture {
		return e, fmt.Errorf("config says %s/%s", cf.OS, cf.Architecture)
	}
	if !slices.Equal(cf.Config.Entrypoint, []string{Binary}) {
		return e, fmt.Errorf("entrypoint %q, want [%q]", cf.Config.Entrypoint, Binary)
	}
	m, err := img.Manifest()
	if err != nil {
		return e, err
	}
	e.Size += m.Config.Size
	for _, l := range m.Layers {
		e.Size += l.Size
	}
	bin, err := readFile(img, Binary)
	if err != nil {
		return e, err
	}
	e.BinarySize = int64(len(bin))
	return e, checkELF(bin, d.Platform.Architecture)
}

// readFile returns the content of the regular, executable file at path in
// img's flattened file system.
func readFile(img v1.Image, path string) ([]byte, error) {
	name := strings.TrimPrefix(path, "/")
	layers, err := img.Layers()
	if err != nil {
		return nil, err
	}
	// The last layer holding the file wins; eipd's image has one layer.
	var found []byte
	var ok bool
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			return nil, err
		}
		b, hit, err := findInTar(rc, name)
		rc.Close()
		if err != nil {
			return nil, fmt.Errorf("read layer: %w", err)
		}
		if hit {
			found, ok = b, true
		}
	}
	if !ok {
		return nil, fmt.Errorf("%s: not in the image", path)
	}
	return found, nil
}

func findInTar(r io.Reader, name string) ([]byte, bool, error) {
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, err
		}
		if strings.TrimPrefix(hdr.Name, "./") != name {
			continue
		}
		if hdr.Typeflag != tar.TypeReg || hdr.Mode&0o111 != 0o111 {
			return nil, false, fmt.Errorf("/%s: not a regular file executable by all (type %q, mode %o)", name, hdr.Typeflag, hdr.Mode)
		}
		b, err := io.ReadAll(tr)
		return b, true, err
	}
}

// checkELF checks that bin is a static Linux executable for goarch.
func checkELF(bin []byte, goarch string) error {
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		return fmt.Errorf("%s: %w", Binary, err)
	}
	defer f.Close()
	want, known := elfMachine(goarch)
	if !known {
		return fmt.Errorf("%s: no ELF machine known for %s", Binary, goarch)
	}
	if f.Machine != want {
		return fmt.Errorf("%s: built for %v, not %s", Binary, f.Machine, goarch)
	}
	if f.Type != elf.ET_EXEC {
		return fmt.Errorf("%s: ELF type %v, want a static executable", Binary, f.Type)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s: dynamically linked; build with CGO_ENABLED=0", Binary)
		}
	}
	return nil
}
