package testenv

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/eip-project/eip/testenv/realnode"
)

const (
	// K8sVersion is the Kubernetes version testenv/k8s builds.
	K8sVersion = "v1.37.2"
	mainModule = "github.com/eip-project/eip"
)

// RepoRoot walks up from the working directory to the directory whose go.mod
// declares the eip module.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find repo root: %w", err)
	}
	for {
		if isMainModule(filepath.Join(dir, "go.mod")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("find repo root: no go.mod of %s above the working directory", mainModule)
		}
		dir = parent
	}
}

func isMainModule(goMod string) bool {
	f, err := os.Open(goMod)
	if err != nil {
		return false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if fields := strings.Fields(s.Text()); len(fields) == 2 && fields[0] == "module" {
			return fields[1] == mainModule
		}
	}
	return false
}

// DefaultK8sBinDir is where scripts/build-k8s.sh puts kube-apiserver, kubectl
// and etcd: $EIP_CACHE (default $HOME/.cache/eip), keyed by the version and a
// hash of the build module, exactly as the script computes it.
func DefaultK8sBinDir(repoRoot string) (string, error) {
	cache, err := cacheDir()
	if err != nil {
		return "", fmt.Errorf("k8s bin dir: %w", err)
	}
	h := sha256.New()
	for _, f := range []string{"go.mod", "go.sum", "cmd/etcd/main.go"} {
		b, err := os.ReadFile(filepath.Join(repoRoot, "testenv", "k8s", f))
		if err != nil {
			return "", fmt.Errorf("k8s bin dir: %w", err)
		}
		h.Write(b)
	}
	sum := hex.EncodeToString(h.Sum(nil))[:12]
	return filepath.Join(cache, "k8s-"+K8sVersion+"-"+sum, "bin"), nil
}

// resolveBins fills in the binary paths of o from the environment and the
// repo layout, without checking that they exist.
func (o *Options) resolveBins() error {
	if o.K8sBinDir == "" {
		o.K8sBinDir = os.Getenv("EIP_K8S_BIN")
	}
	if o.EipdBin == "" {
		o.EipdBin = os.Getenv("EIPD_BIN")
	}
	if o.ManifestsDir != "" && o.K8sBinDir != "" && o.EipdBin != "" && !o.RealNodes {
		return nil
	}
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	if o.ManifestsDir == "" {
		o.ManifestsDir = filepath.Join(root, "manifests")
	}
	if o.EipdBin == "" {
		o.EipdBin = filepath.Join(root, "bin", "eipd")
	}
	if o.K8sBinDir == "" {
		dir, err := DefaultK8sBinDir(root)
		if err != nil {
			return err
		}
		o.K8sBinDir = dir
	}
	if o.RealNodes {
		return o.resolveRealNodeBins(root)
	}
	return nil
}

// Prerequisites returns why a cluster cannot start on this machine (not
// root, missing tools, control-plane binaries not built), or nil.
func Prerequisites(opts Options) error {
	if os.Geteuid() != 0 {
		return errors.New("testenv needs root (network namespaces, raw sockets)")
	}
	var errs error
	for _, tool := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			errs = errors.Join(errs, fmt.Errorf("%s not found (scripts/prereqs.sh installs it)", tool))
		}
	}
	if err := opts.resolveBins(); err != nil {
		return errors.Join(errs, err)
	}
	for _, bin := range []string{"etcd", "kube-apiserver", "kubectl"} {
		if _, err := os.Stat(filepath.Join(opts.K8sBinDir, bin)); err != nil {
			errs = errors.Join(errs, fmt.Errorf("%s not in %s: run scripts/build-k8s.sh (or set EIP_K8S_BIN to its output)", bin, opts.K8sBinDir))
		}
	}
	if opts.RealNodes {
		errs = errors.Join(errs, opts.RealNodeBins.Check())
	}
	if opts.RealNodes && opts.GracefulShutdown != nil {
		errs = errors.Join(errs, realnode.CheckShutdownTools())
	}
	return errs
}

// tail returns the last n lines of a file, for error messages.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(read %s: %v)", path, err)
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// ToolBinDir is where `scripts/build-tool.sh name` puts the binaries pinned by
// testenv/tools/<name>: $EIP_CACHE (default $HOME/.cache/eip)/<name>-<hash>/bin,
// <hash> covering each top-level file's name and content in byte order of the
// names, exactly as the script computes it.
func ToolBinDir(repoRoot, name string) (string, error) {
	cache, err := cacheDir()
	if err != nil {
		return "", fmt.Errorf("%s bin dir: %w", name, err)
	}
	dir := filepath.Join(repoRoot, "testenv", "tools", name)
	entries, err := os.ReadDir(dir) // sorted by name
	if err != nil {
		return "", fmt.Errorf("%s bin dir: %w", name, err)
	}
	h := sha256.New()
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return "", fmt.Errorf("%s bin dir: %w", name, err)
		}
		h.Write([]byte(e.Name() + "\n"))
		h.Write(b)
	}
	sum := hex.EncodeToString(h.Sum(nil))[:12]
	return filepath.Join(cache, name+"-"+sum, "bin"), nil
}

// cacheDir is $EIP_CACHE, or $HOME/.cache/eip.
func cacheDir() (string, error) {
	if cache := os.Getenv("EIP_CACHE"); cache != "" {
		return cache, nil
	}
	home := os.Getenv("HOME")
	if home == "" {
		return "", errors.New("neither EIP_CACHE nor HOME is set")
	}
	return filepath.Join(home, ".cache", "eip"), nil
}
