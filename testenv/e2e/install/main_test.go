// Package install runs README.md's install section verbatim against a
// release: `make release` builds it, its image and chart go to the test
// cluster's own container registry, and the README's code blocks run as a
// user would run them, with only the variables they name set to the test
// cluster's: the registry (REGISTRY), the release's eip.yaml (EIP_YAML), a
// range of the test LAN (EIP_RANGE) and the test web image (WEB_IMAGE). The
// real kubelet nodes pull eipd's image from that registry, which their
// containerd also knows as the mirror of ghcr.io, where the release names
// it.
package install

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/eip-project/eip/testenv"
)

var (
	cluster *testenv.Cluster
	// release is the folder `make release` wrote.
	release string
)

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if testing.Short() {
		fmt.Println("install: skipped with -short")
		return 0
	}
	opts := testenv.Options{Nodes: 2, RealNodes: true, Manifests: []string{}, Registry: true, Mirrored: []string{"ghcr.io"},
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	if err := testenv.Prerequisites(opts); err != nil {
		fmt.Println("install: skipped:", err)
		return 0
	}
	dir, err := os.MkdirTemp("", "eip-install-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "install:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	if release, err = makeRelease(dir); err != nil {
		fmt.Fprintln(os.Stderr, "install:", err)
		return 1
	}
	c, err := testenv.Start(context.Background(), opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "install: start cluster:", err)
		return 1
	}
	cluster = c
	code := m.Run()
	if code != 0 {
		fmt.Fprintln(os.Stderr, "install: logs kept in", c.Dir())
		c.Keep()
	}
	if err := c.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "install: close cluster:", err)
		code = 1
	}
	return code
}

// makeRelease runs `make release` into dir/release, its image for this
// machine's platform alone (the nodes'), and returns the folder.
// EIP_RELEASE_DIR names a release made before instead.
func makeRelease(dir string) (string, error) {
	if d := os.Getenv("EIP_RELEASE_DIR"); d != "" {
		return d, nil
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "release")
	cmd := exec.Command("make", "release", "OUT="+out)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "PLATFORMS=linux/"+runtime.GOARCH)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("make release: %w\n%s", err, b)
	}
	return out, nil
}
