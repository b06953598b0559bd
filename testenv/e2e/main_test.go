// Package e2e is eip's end-to-end suite: real eipd processes in node
// network namespaces, a real kube-apiserver and etcd, and a client
// namespace on the same LAN that pings and ARPs the external IPs. Every
// test asserts on what that client sees and on the Lease holders.
//
// Tests run in parallel, each on a cluster of its own (see clusters and
// testenv/README.md); a test that must run alone says why.
package e2e

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/eip-project/eip/testenv"
)

// lender lends the tests their clusters (see newEnv).
var lender *clusters

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	p := newClusters()
	if err := prerequisites(p.opts); err != nil {
		return testenv.Unavailable("e2e", err)
	}
	lender = p
	code := m.Run()
	if err := p.close(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		code = 1
	}
	return code
}

// prerequisites are testenv's and the eipd binary the tests start.
func prerequisites(opts testenv.Options) error {
	if err := testenv.Prerequisites(opts); err != nil {
		return err
	}
	bin := os.Getenv("EIPD_BIN")
	if bin == "" {
		root, err := testenv.RepoRoot()
		if err != nil {
			return err
		}
		bin = filepath.Join(root, "bin", "eipd")
	}
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("no eipd to test (run make build, or set EIPD_BIN): %w", err)
	}
	return nil
}
