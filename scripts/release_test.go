package scripts

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"
	"sigs.k8s.io/yaml"

	"github.com/eip-project/eip/internal/image"
	"github.com/eip-project/eip/testenv"
)

// TestReleaseCrossReferences runs `make release` into a temporary folder
// and checks that its files name each other right: SHA256SUMS covers every
// file; the krew manifest's sums are the archives'; eip.yaml and the
// packaged chart name the digest of the image the archive holds, and the
// chart with its defaults renders eip.yaml's objects; each SBOM describes
// the binary released, by its sha256.
func TestReleaseCrossReferences(t *testing.T) {
	root, err := testenv.RepoRoot()
	assert.NilError(t, err)
	helmDir, err := testenv.ToolBinDir(root, "helm")
	assert.NilError(t, err)
	helm := filepath.Join(helmDir, "helm")
	if _, err := os.Stat(helm); err != nil {
		t.Skipf("helm is not built (scripts/build-tool.sh helm): %v", err)
	}
	b, err := os.ReadFile(filepath.Join(root, "VERSION"))
	assert.NilError(t, err)
	version := strings.TrimSpace(string(b))
	out := t.TempDir()
	cmd := exec.Command("make", "release", "OUT="+out)
	cmd.Dir = root
	logs, err := cmd.CombinedOutput()
	assert.NilError(t, err, "%s", logs)
	t.Logf("make release:\n%s", logs)

	sums := checkSums(t, out)
	var archives []string
	for name := range sums {
		if strings.HasPrefix(name, "kubectl-eip_") && strings.HasSuffix(name, ".tar.gz") {
			archives = append(archives, name)
		}
	}
	slices.Sort(archives)
	assert.DeepEqual(t, archives, []string{"kubectl-eip_darwin_amd64.tar.gz", "kubectl-eip_darwin_arm64.tar.gz",
		"kubectl-eip_linux_amd64.tar.gz", "kubectl-eip_linux_arm64.tar.gz"})

	// The krew manifest.
	var plugin struct {
		Spec struct {
			Version   string `json:"version"`
			Platforms []struct {
				Selector struct {
					MatchLabels map[string]string `json:"matchLabels"`
				} `json:"selector"`
				URI    string `json:"uri"`
				SHA256 string `json:"sha256"`
			} `json:"platforms"`
		} `json:"spec"`
	}
	readYAML(t, filepath.Join(out, "krew", "eip.yaml"), &plugin)
	assert.Equal(t, plugin.Spec.Version, version)
	assert.Equal(t, len(plugin.Spec.Platforms), len(archives))
	for _, p := range plugin.Spec.Platforms {
		name := fmt.Sprintf("kubectl-eip_%s_%s.tar.gz", p.Selector.MatchLabels["os"], p.Selector.MatchLabels["arch"])
		assert.Check(t, is.Equal(p.URI, "https://github.com/eip-project/eip/releases/download/"+version+"/"+name))
		assert.Check(t, is.Equal(p.SHA256, sums[name]), name)
	}

	// The image, its digest and its binaries.
	dir := t.TempDir()
	idx, ann, err := image.Open(filepath.Join(out, "eipd-image.tar"), dir)
	assert.NilError(t, err)
	assert.Check(t, is.Equal(ann["org.opencontainers.image.ref.name"], version), "the archive's tag: %v", ann)
	digest, err := idx.Digest()
	assert.NilError(t, err)
	ref := "ghcr.io/eip-project/eipd:" + version + "@" + digest.String()
	binaries := imageBinaries(t, idx)
	assert.DeepEqual(t, slices.Sorted(maps.Keys(binaries)), []string{"linux/amd64", "linux/arm64"})

	// eip.yaml and the chart name that digest, and render the same objects.
	manifest, err := os.ReadFile(filepath.Join(out, "eip.yaml"))
	assert.NilError(t, err)
	installed := decodeObjects(t, string(manifest))
	ds := installed["DaemonSet eip-system/eipd"]
	assert.Equal(t, testenv.Path(ds, "spec", "template", "spec", "containers", 0, "image"), ref)
	chartFile := filepath.Join(out, "eip-"+strings.TrimPrefix(version, "v")+".tgz")
	shown := run(t, helm, "show", "chart", chartFile)
	assert.Check(t, is.Contains(shown, "\nversion: "+strings.TrimPrefix(version, "v")+"\n"))
	assert.Check(t, is.Contains(shown, "\nappVersion: "+version+"\n"))
	rendered := decodeObjects(t, run(t, helm, "template", "eip", chartFile))
	assert.DeepEqual(t, rendered, installed)

	// An SBOM of every binary released, naming it by its sha256.
	for platform, bin := range binaries {
		name := "eipd-" + strings.ReplaceAll(platform, "/", "-")
		checkSBOM(t, filepath.Join(out, name+".spdx.json"), name, bin, version)
	}
	for _, a := range archives {
		name := strings.TrimSuffix(a, ".tar.gz")
		checkSBOM(t, filepath.Join(out, name+".spdx.json"), "kubectl-eip", archived(t, filepath.Join(out, a), "kubectl-eip"), version)
	}
	spdx := 0
	for name := range sums {
		if strings.HasSuffix(name, ".spdx.json") {
			spdx++
		}
	}
	assert.Equal(t, spdx, len(binaries)+len(archives), "one SBOM per binary, no other")
}

// checkSums checks that SHA256SUMS lists every other file under dir with
// its sha256, and returns them by path.
func checkSums(t *testing.T, dir string) map[string]string {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "SHA256SUMS"))
	assert.NilError(t, err)
	defer f.Close()
	sums := map[string]string{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		sum, name, ok := strings.Cut(s.Text(), "  ")
		assert.Assert(t, ok, "SHA256SUMS line %q", s.Text())
		sums[name] = sum
	}
	assert.NilError(t, s.Err())
	var files []string
	assert.NilError(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == "SHA256SUMS" {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		files = append(files, rel)
		b, err := os.ReadFile(path)
		assert.Check(t, is.Equal(sums[rel], sha256Hex(b)), rel)
		return err
	}))
	slices.Sort(files)
	assert.DeepEqual(t, slices.Sorted(maps.Keys(sums)), files)
	return sums
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	assert.NilError(t, err)
	assert.NilError(t, yaml.Unmarshal(b, v))
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config", "HELM_DATA_HOME="+home+"/data")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	assert.NilError(t, err, "%s %s: %s", name, strings.Join(args, " "), stderr.String())
	return string(out)
}

// decodeObjects decodes a YAML stream into its objects, keyed by kind,
// namespace and name.
func decodeObjects(t *testing.T, stream string) map[string]testenv.Rendered {
	t.Helper()
	out, err := testenv.DecodeRendered(stream)
	assert.NilError(t, err)
	return out
}

// imageBinaries returns /eipd of each platform's image in the index.
func imageBinaries(t *testing.T, idx v1.ImageIndex) map[string][]byte {
	t.Helper()
	m, err := idx.IndexManifest()
	assert.NilError(t, err)
	out := map[string][]byte{}
	for _, d := range m.Manifests {
		img, err := idx.Image(d.Digest)
		assert.NilError(t, err)
		layers, err := img.Layers()
		assert.NilError(t, err)
		for _, l := range layers {
			rc, err := l.Uncompressed()
			assert.NilError(t, err)
			if b, ok := fromTar(t, rc, "eipd"); ok {
				out[d.Platform.OS+"/"+d.Platform.Architecture] = b
			}
			rc.Close()
		}
	}
	return out
}

// archived returns a file of a .tar.gz archive.
func archived(t *testing.T, path, name string) []byte {
	t.Helper()
	f, err := os.Open(path)
	assert.NilError(t, err)
	defer f.Close()
	z, err := gzip.NewReader(f)
	assert.NilError(t, err)
	b, ok := fromTar(t, z, name)
	assert.Assert(t, ok, "no %s in %s", name, path)
	return b
}

func fromTar(t *testing.T, r io.Reader, name string) ([]byte, bool) {
	t.Helper()
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, false
		}
		assert.NilError(t, err)
		if strings.TrimPrefix(h.Name, "./") == name || strings.TrimPrefix(h.Name, "/") == name {
			b, err := io.ReadAll(tr)
			assert.NilError(t, err)
			return b, true
		}
	}
}

// checkSBOM checks an SPDX document: it describes one file, named name,
// with bin's sha256, generated from eip at version, which depends on the
// Kubernetes client among others.
func checkSBOM(t *testing.T, path, name string, bin []byte, version string) {
	t.Helper()
	var doc struct {
		SPDXVersion string `json:"spdxVersion"`
		Files       []struct {
			FileName  string `json:"fileName"`
			Checksums []struct {
				Algorithm string `json:"algorithm"`
				Value     string `json:"checksumValue"`
			} `json:"checksums"`
		} `json:"files"`
		Packages []struct {
			Name    string `json:"name"`
			Version string `json:"versionInfo"`
		} `json:"packages"`
	}
	b, err := os.ReadFile(path)
	assert.NilError(t, err)
	assert.NilError(t, json.Unmarshal(b, &doc), path)
	assert.Check(t, is.Equal(doc.SPDXVersion, "SPDX-2.3"), path)
	assert.Assert(t, is.Len(doc.Files, 1), path)
	assert.Check(t, is.Equal(doc.Files[0].FileName, "./"+name), path)
	assert.Check(t, is.DeepEqual(doc.Files[0].Checksums[0].Value, sha256Hex(bin)), "%s: not the released binary", path)
	packages := map[string]string{}
	for _, p := range doc.Packages {
		packages[p.Name] = p.Version
	}
	assert.Check(t, is.Equal(packages["github.com/eip-project/eip"], version), path)
	assert.Check(t, packages["k8s.io/client-go"] != "", "%s lists no k8s.io/client-go: %v", path, packages)
}
