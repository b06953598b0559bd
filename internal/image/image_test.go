package image

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"
)

// fakeELF returns the smallest file debug/elf accepts as an executable for
// machine; with interp it also declares a dynamic loader.
func fakeELF(t *testing.T, machine elf.Machine, interp bool) []byte {
	t.Helper()
	h := elf.Header64{
		Type: uint16(elf.ET_EXEC), Machine: uint16(machine), Version: uint32(elf.EV_CURRENT),
		Ehsize: 64, Phentsize: 56, Shentsize: 64,
	}
	copy(h.Ident[:], elf.ELFMAG)
	h.Ident[elf.EI_CLASS] = byte(elf.ELFCLASS64)
	h.Ident[elf.EI_DATA] = byte(elf.ELFDATA2LSB)
	h.Ident[elf.EI_VERSION] = byte(elf.EV_CURRENT)
	var progs []elf.Prog64
	if interp {
		h.Phoff, h.Phnum = 64, 1
		progs = append(progs, elf.Prog64{Type: uint32(elf.PT_INTERP)})
	}
	var buf bytes.Buffer
	assert.NilError(t, binary.Write(&buf, binary.LittleEndian, h))
	for _, p := range progs {
		assert.NilError(t, binary.Write(&buf, binary.LittleEndian, p))
	}
	return buf.Bytes()
}

func writeTemp(t *testing.T, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	assert.NilError(t, os.WriteFile(p, b, 0o755))
	return p
}

func options(t *testing.T, binaries map[string][]byte) Options {
	t.Helper()
	o := Options{
		Binaries: map[string]string{},
		Version:  "v1.2.3",
		Revision: "0123456789abcdef",
		Source:   "https://github.com/eip-project/eip",
		Created:  time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC),
	}
	for p, b := range binaries {
		o.Binaries[p] = writeTemp(t, "eipd", b)
	}
	return o
}

// roundTrip builds, writes and reopens an image, as make image does.
func roundTrip(t *testing.T, o Options) (v1.ImageIndex, map[string]string, string) {
	t.Helper()
	idx, err := Build(o)
	assert.NilError(t, err)
	out := filepath.Join(t.TempDir(), "eipd-image.tar")
	assert.NilError(t, WriteArchive(out, idx, "ghcr.io/eip-project/eipd", o.Version))
	st, err := os.Stat(out)
	assert.NilError(t, err)
	assert.Equal(t, st.Mode().Perm(), os.FileMode(0o644))
	back, ann, err := Open(out, t.TempDir())
	assert.NilError(t, err)
	return back, ann, out
}

func TestImageRoundTrip(t *testing.T) {
	amd, arm := fakeELF(t, elf.EM_X86_64, false), fakeELF(t, elf.EM_AARCH64, false)
	o := options(t, map[string][]byte{"linux/amd64": amd, "linux/arm64": arm})
	idx, ann, _ := roundTrip(t, o)

	assert.DeepEqual(t, ann, map[string]string{
		"io.containerd.image.name":          "ghcr.io/eip-project/eipd:v1.2.3",
		"org.opencontainers.image.ref.name": "v1.2.3",
	})
	mt, err := idx.MediaType()
	assert.NilError(t, err)
	assert.Equal(t, mt, types.OCIImageIndex)

	entries, err := Verify(idx, []string{"linux/arm64", "linux/amd64"})
	assert.NilError(t, err)
	assert.Equal(t, len(entries), 2)
	for i, want := range []struct {
		platform string
		bin      []byte
	}{{"linux/amd64", amd}, {"linux/arm64", arm}} {
		e := entries[i]
		assert.Equal(t, e.Platform, want.platform)
		assert.Equal(t, e.BinarySize, int64(len(want.bin)))
		img, err := idx.Image(e.Digest)
		assert.NilError(t, err)
		manifestSize, err := img.Size()
		assert.NilError(t, err)
		rawConfig, err := img.RawConfigFile()
		assert.NilError(t, err)
		layers, err := img.Layers()
		assert.NilError(t, err)
		assert.Equal(t, len(layers), 1, "scratch plus one layer")
		layerSize, err := layers[0].Size()
		assert.NilError(t, err)
		assert.Equal(t, e.Size, manifestSize+int64(len(rawConfig))+layerSize, "size is what a node pulls")

		got, err := readFile(img, Binary)
		assert.NilError(t, err)
		assert.Check(t, bytes.Equal(got, want.bin), "%s: /eipd is not the binary given", want.platform)

		mt, err := img.MediaType()
		assert.NilError(t, err)
		assert.Equal(t, mt, types.OCIManifestSchema1)
		cf, err := img.ConfigFile()
		assert.NilError(t, err)
		assert.Check(t, is.Equal(cf.Config.User, "0:0"))
		assert.Check(t, is.DeepEqual(cf.Config.Entrypoint, []string{"/eipd"}))
		assert.Check(t, is.Len(cf.Config.Cmd, 0))
		assert.Check(t, is.DeepEqual(cf.Config.ExposedPorts, map[string]struct{}{"9402/tcp": {}}))
		assert.Check(t, is.Equal(cf.Created.Time, o.Created))
		assert.Check(t, is.DeepEqual(cf.Config.Labels, map[string]string{
			"org.opencontainers.image.title":       "eipd",
			"org.opencontainers.image.description": "eip node daemon: external IPs for bare-metal Kubernetes",
			"org.opencontainers.image.source":      "https://github.com/eip-project/eip",
			"org.opencontainers.image.version":     "v1.2.3",
			"org.opencontainers.image.revision":    "0123456789abcdef",
			"org.opencontainers.image.licenses":    "Apache-2.0",
			"org.opencontainers.image.created":     "2025-06-01T12:00:00Z",
		}))
	}
}

func TestImageIsReproducible(t *testing.T) {
	o := options(t, map[string][]byte{"linux/amd64": fakeELF(t, elf.EM_X86_64, false), "linux/arm64": fakeELF(t, elf.EM_AARCH64, false)})
	_, _, a := roundTrip(t, o)
	_, _, b := roundTrip(t, o)
	ab, err := os.ReadFile(a)
	assert.NilError(t, err)
	bb, err := os.ReadFile(b)
	assert.NilError(t, err)
	assert.Check(t, bytes.Equal(ab, bb), "two builds of the same input differ")
}

func TestVerifyRejects(t *testing.T) {
	amd, arm := fakeELF(t, elf.EM_X86_64, false), fakeELF(t, elf.EM_AARCH64, false)
	for _, tc := range []struct {
		name     string
		binaries map[string][]byte
		want     []string
		err      string
	}{
		{
			name:     "binaries swapped",
			binaries: map[string][]byte{"linux/amd64": arm, "linux/arm64": amd},
			want:     []string{"linux/amd64", "linux/arm64"},
			err:      "verify image for linux/amd64: /eipd: built for EM_AARCH64, not amd64",
		},
		{
			name:     "platform missing",
			binaries: map[string][]byte{"linux/amd64": amd},
			want:     []string{"linux/amd64", "linux/arm64"},
			err:      "verify image: platforms [linux/amd64], want [linux/amd64 linux/arm64]",
		},
		{
			name:     "dynamically linked",
			binaries: map[string][]byte{"linux/amd64": fakeELF(t, elf.EM_X86_64, true)},
			want:     []string{"linux/amd64"},
			err:      "dynamically linked; build with CGO_ENABLED=0",
		},
		{
			name:     "not an executable",
			binaries: map[string][]byte{"linux/amd64": []byte("#!/bin/sh\necho hi\n")},
			want:     []string{"linux/amd64"},
			err:      "verify image for linux/amd64: /eipd: bad magic number",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			idx, _, _ := roundTrip(t, options(t, tc.binaries))
			_, err := Verify(idx, tc.want)
			assert.ErrorContains(t, err, tc.err)
		})
	}
}

func TestBuildRejects(t *testing.T) {
	amd := fakeELF(t, elf.EM_X86_64, false)
	_, err := Build(Options{Version: "v1", Source: "s", Created: time.Now()})
	assert.ErrorContains(t, err, "no binaries")

	o := options(t, map[string][]byte{"linux/amd64": amd})
	o.Version = ""
	_, err = Build(o)
	assert.ErrorContains(t, err, "version, source and creation time are required")

	o = options(t, map[string][]byte{"linux/amd64": amd})
	o.Binaries["linux/arm64"] = filepath.Join(t.TempDir(), "missing")
	_, err = Build(o)
	assert.ErrorContains(t, err, "build image for linux/arm64: read binary")

	o = options(t, map[string][]byte{"linux/amd64": {}})
	_, err = Build(o)
	assert.ErrorContains(t, err, "empty file")
}

func TestOpenRejectsEscapingEntries(t *testing.T) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	assert.NilError(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "../escape", Mode: 0o644, Size: 1}))
	_, err := tw.Write([]byte("x"))
	assert.NilError(t, err)
	assert.NilError(t, tw.Close())
	path := writeTemp(t, "evil.tar", buf.Bytes())
	dir := t.TempDir()
	_, _, err = Open(path, dir)
	assert.ErrorContains(t, err, `entry "../escape" leaves the archive`)
	_, err = os.Stat(filepath.Join(filepath.Dir(dir), "escape"))
	assert.Check(t, os.IsNotExist(err))
}
