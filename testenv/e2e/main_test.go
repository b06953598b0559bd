// Package e2e is eip's end-to-end suite: real eipd processes in node
// network namespaces, a real kube-apiserver and etcd, and a client
// namespace on the same LAN that pings and ARPs the external IPs. Every
// test asserts on what that client sees and on the Lease holders.
package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"

	"github.com/eip-project/eip/testenv"
)

// cluster is shared by the suite; each test resets it (see newEnv).
var cluster *testenv.Cluster

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		fmt.Println("e2e: skipped: needs root for network namespaces")
		os.Exit(0)
	}
	if os.Getenv("EIP_K8S_BIN") == "" {
		fmt.Println("e2e: skipped: EIP_K8S_BIN is not set (run scripts/build-k8s.sh, or make test)")
		os.Exit(0)
	}
	ctx := context.Background()
	c, err := testenv.Start(ctx, testenv.Options{Nodes: 3, Router: true, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: start cluster:", err)
		os.Exit(1)
	}
	cluster = c
	code := m.Run()
	if code != 0 {
		fmt.Fprintln(os.Stderr, "e2e: logs kept in", c.Dir())
		c.Keep()
	}
	if err := c.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: close cluster:", err)
	}
	os.Exit(code)
}
