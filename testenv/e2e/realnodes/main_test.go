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
	"testing"

	"github.com/eip-project/eip/testenv"
	"github.com/eip-project/eip/testenv/workload"
)

// The two builds of eipd's image the suite imports: the first also under
// the manifests' name, the second for `kubectl set image`.
const (
	imageName = workload.ImageName
	version1  = "e2e-1"
	version2  = "e2e-2"
)

// beforeFormatChange is the last commit before liveness datagrams named
// their destination and carried their sender's boot and a counter
// (0e3401e): eipds on either side of it cannot read each other's
// datagrams. The suite imports its image as versionOld and keeps its tree
// in oldTree, for TestRolloutAcrossLivenessFormatChange.
const (
	beforeFormatChange = "18ecae8f5d790c92c6bcf1bc3bc715009bc4a1f7"
	versionOld         = "e2e-old"
)

var (
	cluster *testenv.Cluster
	oldTree string
)

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if testing.Short() {
		fmt.Println("realnodes: skipped with -short")
		return 0
	}
	opts := testenv.Options{Nodes: 3, RealNodes: true, Manifests: []string{}, GracefulShutdown: &gracefulShutdown,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	if err := testenv.Prerequisites(opts); err != nil {
		return testenv.Unavailable("realnodes", err)
	}
	dir, err := os.MkdirTemp("", "eip-realnodes-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "realnodes:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	for _, v := range []string{version1, version2} {
		img, err := workload.EipdImage(context.Background(), dir, v, v == version1)
		if err != nil {
			fmt.Fprintln(os.Stderr, "realnodes:", err)
			return 1
		}
		opts.Images = append(opts.Images, img)
	}
	img, tree, err := workload.EipdImageAt(context.Background(), dir, versionOld, beforeFormatChange)
	if err != nil {
		fmt.Fprintln(os.Stderr, "realnodes:", err)
		return 1
	}
	opts.Images, oldTree = append(opts.Images, img), tree
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
