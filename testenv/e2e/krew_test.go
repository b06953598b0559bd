package e2e

import (
	"context"
	"debug/elf"
	"debug/macho"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"
	"sigs.k8s.io/yaml"

	"github.com/eip-project/eip/testenv"
)

// TestKrewInstallsThePlugin runs the README's `make release` and `kubectl
// krew install` lines as written, with a real krew and KREW_ROOT in a
// temporary directory: validate-krew-manifest accepts the manifest, krew
// installs each platform's archive (checking its sha256 against the
// manifest), and `kubectl eip status` then works through kubectl's plugin
// lookup, from the client namespace against the test cluster.
func TestKrewInstallsThePlugin(t *testing.T) {
	t.Parallel()
	release, install, status := readmeLine(t, "make release"), readmeLine(t, "kubectl krew install "), readmeLine(t, "kubectl eip status")
	krew := tool(t, "krew", "krew")
	validate := tool(t, "krew", "validate-krew-manifest")
	root, err := testenv.RepoRoot()
	assert.NilError(t, err)
	e := newEnv(t, defaultConfig())
	ip := testenv.ServiceIP(121)
	e.service("krew", ip)
	holder := e.served(ip)

	// kubectl finds krew as the plugin kubectl-krew.
	plugins := t.TempDir()
	assert.NilError(t, os.Symlink(krew, filepath.Join(plugins, "kubectl-krew")))
	path := plugins + ":" + filepath.Dir(e.c.KubectlPath()) + ":" + os.Getenv("PATH")
	run := func(line string, env ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", "-o", "pipefail", "-c", line)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), append([]string{"PATH=" + path}, env...)...)
		start := time.Now()
		out, err := cmd.CombinedOutput()
		assert.NilError(t, err, "%s %s:\n%s", strings.Join(env, " "), line, out)
		t.Logf("$ %s %s (%s)\n%s", strings.Join(env, " "), line, time.Since(start).Round(100*time.Millisecond), out)
		return string(out)
	}

	run(release)
	manifest := filepath.Join(root, "bin", "release", "krew", "eip.yaml")
	run(validate + " -manifest " + manifest + " -skip-install")
	b, err := os.ReadFile(manifest)
	assert.NilError(t, err)
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
	assert.NilError(t, yaml.Unmarshal(b, &plugin))
	assert.Equal(t, len(plugin.Spec.Platforms), 4)

	// Every platform installs from its archive; the host's with the
	// README's own line.
	var hostRoot string
	for _, p := range plugin.Spec.Platforms {
		goos, goarch := p.Selector.MatchLabels["os"], p.Selector.MatchLabels["arch"]
		platform := goos + "_" + goarch
		archive := "bin/release/kubectl-eip_" + platform + ".tar.gz"
		assert.Check(t, strings.HasSuffix(p.URI, "/kubectl-eip_"+platform+".tar.gz"), p.URI)
		krewRoot := t.TempDir()
		line := "kubectl krew install --manifest=bin/release/krew/eip.yaml --archive=" + archive
		if platform == "linux_amd64" {
			assert.Equal(t, install, line, "the README installs the linux/amd64 archive")
			hostRoot = krewRoot
		}
		out := run(line, "KREW_ROOT="+krewRoot, "KREW_OS="+goos, "KREW_ARCH="+goarch)
		assert.Check(t, is.Contains(out, `Installed plugin: eip`))
		store := filepath.Join(krewRoot, "store", "eip", plugin.Spec.Version)
		for _, f := range []string{"kubectl-eip", "kubectl_complete-eip", "LICENSE"} {
			_, err := os.Stat(filepath.Join(store, f))
			assert.Check(t, err, "%s: %s", platform, f)
		}
		assert.Check(t, is.Equal(binaryPlatform(t, filepath.Join(store, "kubectl-eip")), goos+"/"+goarch))
	}
	assert.Assert(t, hostRoot != "", "no linux/amd64 platform in the manifest")

	// A corrupted archive is refused: krew checks the sha256.
	bad := filepath.Join(t.TempDir(), "bad.tar.gz")
	good, err := os.ReadFile(filepath.Join(root, "bin", "release", "kubectl-eip_linux_amd64.tar.gz"))
	assert.NilError(t, err)
	assert.NilError(t, os.WriteFile(bad, append(good, 0), 0o644))
	cmd := exec.Command("kubectl", "krew", "install", "--manifest="+manifest, "--archive="+bad)
	cmd.Env = append(os.Environ(), "PATH="+path, "KREW_ROOT="+t.TempDir(), "KREW_OS=linux", "KREW_ARCH=amd64")
	out, err := cmd.CombinedOutput()
	assert.Check(t, err != nil, "krew installed a corrupted archive:\n%s", out)
	assert.Check(t, is.Contains(string(out), "checksum does not match"))

	// kubectl finds the plugin krew linked into $KREW_ROOT/bin.
	shown := (&readme{e: e, root: root}).client(t, status, filepath.Join(hostRoot, "bin"))
	t.Logf("%s:\n%s", status, shown)
	assert.Check(t, is.Contains(shown, ip.String()))
	assert.Check(t, is.Contains(shown, holder))
}

// binaryPlatform reads an executable's header: "linux/amd64", "darwin/arm64"…
func binaryPlatform(t *testing.T, path string) string {
	t.Helper()
	if f, err := elf.Open(path); err == nil {
		defer f.Close()
		return "linux/" + map[elf.Machine]string{elf.EM_X86_64: "amd64", elf.EM_AARCH64: "arm64"}[f.Machine]
	}
	f, err := macho.Open(path)
	assert.NilError(t, err, "%s is neither ELF nor Mach-O", path)
	defer f.Close()
	return "darwin/" + map[macho.Cpu]string{macho.CpuAmd64: "amd64", macho.CpuArm64: "arm64"}[f.Cpu]
}
