package bench

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/eip-project/eip/testenv"
)

// The scale scenarios in miniature, so that they cannot rot: a cold start
// with the API server's own Lease create rate and a mass failover on three
// nodes, and the nodes scenario on five. It asserts what must hold at any
// size and speed (everything bound once, the nodes scenario's IPs on every
// node, every lost IP on a survivor and answering, never two MACs, every
// figure measured), never a time.
func TestScaleScenariosShort(t *testing.T) {
	ctx := context.Background()
	c, log := shortCluster(t, testenv.Options{Nodes: 5})
	r, err := Run(ctx, Options{
		Cluster: c, Log: log, Only: []string{ScenarioScale, ScenarioNodes},
		ScaleIPs: []int{120}, NodeCounts: []int{5}, NodeIPs: 60,
		// A window longer than a slow heartbeat's period (5 s with liveness
		// over the LAN), so that every node renews within it.
		Window: 6 * time.Second, Settle: time.Second, EipdArgs: []string{"-v=0"}, KubectlEip: kubectlEip(t),
	})
	assert.NilError(t, err)
	assert.Check(t, len(r.Errors) == 0, "%v", r.Errors)
	assert.Equal(t, len(r.Scale), 1)
	assert.Equal(t, len(r.ByNodes), 1)
	s, n := r.Scale[0], r.ByNodes[0]
	assert.Equal(t, s.Nodes, 3)
	assert.Equal(t, n.Nodes, 5)
	assert.Assert(t, s.LeaseRate != nil)
	assert.Check(t, s.LeaseRate.Best > 0 && len(s.LeaseRate.Tries) > 0)
	// The nodes scenario's eipds joined before the Services came, so the
	// IPs are spread by rank over every node, not taken by the first
	// started: each of the five holds some of the 60.
	assert.Check(t, n.Join > 0)
	for _, d := range n.Daemons {
		assert.Check(t, d.Bound > 0, "%s holds none of the IPs: %+v", d.Node, n.Daemons)
	}
	for _, res := range []ScaleResult{s, n} {
		assert.Check(t, res.ColdStart > 0)
		assert.Check(t, res.SteadyAPI.Window > 0 && res.SteadyAPI.Writes > 0 && res.SteadyAPI.Events > 0 && res.SteadyAPI.CPU > 0, "%+v", res.SteadyAPI)
		assert.Equal(t, len(res.Daemons), res.Nodes)
		m := res.MassFailover
		assert.Assert(t, m != nil)
		assert.Check(t, m.IPs > 0)
		assert.Equal(t, m.Missing, 0)
		assert.Equal(t, len(m.Bound), m.IPs)
		assert.Equal(t, len(m.Answered), min(massProbes, m.IPs))
		assert.Equal(t, m.TwoMACs+m.DoubleBound, 0)
	}
	for _, f := range r.figures() {
		assert.Check(t, f.Summary.N > 0, "figure %q not measured: %s", f.Name, f.Note)
	}
}

// The bgp scenario in miniature: two failovers and two moves through the
// router. It asserts what must hold at any speed (every sample taken, the
// dead holder's route still at the router when the client was answered
// again, a move never on two nodes, every figure measured), never a time.
func TestBGPScenarioShort(t *testing.T) {
	ctx := context.Background()
	c, log := shortCluster(t, testenv.Options{Nodes: 3, Router: true})
	r, err := Run(ctx, Options{
		Cluster: c, Log: log, Only: []string{ScenarioBGP}, BGPReps: 2,
		EipdArgs: []string{"-v=0"}, KubectlEip: kubectlEip(t),
	})
	assert.NilError(t, err)
	assert.Check(t, len(r.Errors) == 0, "%v", r.Errors)
	assert.Equal(t, len(r.BGP), 4)
	for _, s := range r.BGP {
		assert.Check(t, s.Error == "" && s.From != "" && s.To != "" && s.From != s.To, "%+v", s)
		if s.Kind == BGPFailover {
			assert.Check(t, s.StalePath && s.Answered > 0, "%+v", s)
		} else {
			assert.Check(t, s.DoubleBound == 0, "%+v", s)
		}
	}
	assert.Equal(t, r.RouterHoldTime, testenv.RouterHoldTime)
	for _, f := range r.figures() {
		assert.Check(t, f.Summary.N > 0, "figure %q not measured: %s", f.Name, f.Note)
	}
}

// kubectlEip is the plugin the scenarios run: $KUBECTL_EIP_BIN, else the
// repository's bin/kubectl-eip (make build).
func kubectlEip(t *testing.T) string {
	if bin := os.Getenv("KUBECTL_EIP_BIN"); bin != "" {
		return bin
	}
	root, err := testenv.RepoRoot()
	assert.NilError(t, err)
	return filepath.Join(root, "bin", "kubectl-eip")
}

// shortCluster starts a cluster for a miniature scenario, torn down when
// the test ends (kept when it failed), or skips the test where none can run.
func shortCluster(t *testing.T, opts testenv.Options) (*testenv.Cluster, *slog.Logger) {
	t.Helper()
	if err := testenv.Prerequisites(opts); err != nil {
		if os.Getenv(testenv.SkipEnv) == "1" {
			t.Skip(err)
		}
		t.Fatalf("%v (set %s=1 to skip)", err, testenv.SkipEnv)
	}
	opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, err := testenv.Start(context.Background(), opts)
	assert.NilError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			c.Keep()
		}
		assert.Check(t, c.Close())
	})
	return c, opts.Logger
}
