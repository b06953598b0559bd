package e2e

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/eip-project/eip/testenv"
)

// clusters lends each test a cluster of its own for the test's duration,
// so that tests calling t.Parallel run at once without seeing each other:
// a cluster is a control plane and a LAN in network namespaces named by
// its run id, with the same addresses inside as every other cluster's.
// A cluster is started when a test asks and none is idle, so there are at
// most as many as tests run at once (go test's -parallel, plus the serial
// tests, which run before the parallel ones, one at a time). A test that
// failed may have left its cluster broken (an API server stopped, a link
// cut): its cluster is closed with its logs kept, not lent again.
type clusters struct {
	opts testenv.Options

	mu     sync.Mutex
	idle   []*testenv.Cluster
	all    []*testenv.Cluster
	kept   []string // run dirs of the clusters of failed tests
	closed bool
}

func newClusters() *clusters {
	return &clusters{opts: testenv.Options{Nodes: 3, Router: true,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}}
}

// get lends t a cluster until t's cleanup, which runs after every cleanup
// t registers later (they restore links, API servers and the like first).
func (p *clusters) get(t *testing.T) *testenv.Cluster {
	t.Helper()
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		t.Fatal("e2e: the suite's clusters are closed")
	}
	var c *testenv.Cluster
	if n := len(p.idle); n > 0 {
		c, p.idle = p.idle[n-1], p.idle[:n-1]
	}
	p.mu.Unlock()
	if c == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		var err error
		c, err = testenv.Start(ctx, p.opts)
		cancel()
		if err != nil {
			t.Fatalf("e2e: start a cluster: %v", err)
		}
		p.mu.Lock()
		p.all = append(p.all, c)
		p.mu.Unlock()
	}
	t.Cleanup(func() { p.put(t, c) })
	return c
}

func (p *clusters) put(t *testing.T, c *testenv.Cluster) {
	if t.Failed() {
		c.Keep()
		t.Logf("e2e: cluster %s of this test is closed; logs kept in %s", c.ID(), c.Dir())
		p.mu.Lock()
		p.kept = append(p.kept, c.Dir())
		p.all = slices.DeleteFunc(p.all, func(o *testenv.Cluster) bool { return o == c })
		p.mu.Unlock()
		if err := c.Close(); err != nil {
			t.Errorf("e2e: close cluster %s: %v", c.ID(), err)
		}
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.idle = append(p.idle, c)
}

// close closes every cluster still open and lists the run dirs kept.
func (p *clusters) close() error {
	p.mu.Lock()
	p.closed = true
	all := p.all
	kept := p.kept
	p.mu.Unlock()
	var errs error
	for _, c := range all {
		if err := c.Close(); err != nil {
			errs = errors.Join(errs, fmt.Errorf("close cluster %s: %w", c.ID(), err))
		}
	}
	for _, dir := range kept {
		fmt.Fprintln(os.Stderr, "e2e: logs of a failed test's cluster kept in", dir)
	}
	return errs
}
