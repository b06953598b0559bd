// Package realnodes is the end-to-end suite on real kubelet nodes: eip is
// installed the way its users install it (`kubectl apply -k manifests/` with
// the image from `make image`), a web application runs behind its IPs as a
// Deployment with pod networking, and the client namespace measures what an
// application user sees: HTTP requests through ARP, the holder node,
// kube-proxy and a pod, and 10 ms pings.
package realnodes

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
	"github.com/eip-project/eip/testenv/realnode"
)

// The image name in manifests/ (kustomization.yaml sets tag dev), and the
// two builds the suite imports: the first under the manifests' name too,
// the second for `kubectl set image`.
const (
	imageName = "ghcr.io/eip-project/eipd"
	version1  = "e2e-1"
	version2  = "e2e-2"
)

var cluster *testenv.Cluster

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if testing.Short() {
		fmt.Println("realnodes: skipped with -short")
		return 0
	}
	opts := testenv.Options{Nodes: 3, RealNodes: true, Manifests: []string{},
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	if err := testenv.Prerequisites(opts); err != nil {
		fmt.Println("realnodes: skipped:", err)
		return 0
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "realnodes:", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "eip-realnodes-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "realnodes:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	for _, v := range []string{version1, version2} {
		img, err := makeImage(root, dir, v)
		if err != nil {
			fmt.Fprintln(os.Stderr, "realnodes:", err)
			return 1
		}
		opts.Images = append(opts.Images, img)
	}
	ctx := context.Background()
	c, err := testenv.Start(ctx, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "realnodes: start cluster:", err)
		return 1
	}
	cluster = c
	code := m.Run()
	if code != 0 {
		fmt.Fprintln(os.Stderr, "realnodes: logs kept in", c.Dir())
		c.Keep()
	}
	if err := c.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "realnodes: close cluster:", err)
		code = 1
	}
	return code
}

// makeImage builds eipd's image the way `make image` does (scripts/image.sh),
// for this machine's platform only. The first build is also tagged with the
// manifests' image, as pushing it under that name would.
func makeImage(root, dir, version string) (realnode.Image, error) {
	out := filepath.Join(dir, "eipd-"+version+".tar")
	cmd := exec.Command(filepath.Join(root, "scripts", "image.sh"))
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "VERSION="+version, "PLATFORMS=linux/"+runtime.GOARCH, "OUT="+out, "IMAGE="+imageName)
	if b, err := cmd.CombinedOutput(); err != nil {
		return realnode.Image{}, fmt.Errorf("scripts/image.sh: %w: %s", err, b)
	}
	img := realnode.Image{Archive: out, Ref: imageName + ":" + version}
	if version == version1 {
		img.Tags = []string{imageName + ":dev"}
	}
	return img, nil
}
