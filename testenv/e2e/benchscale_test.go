package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"github.com/eip-project/eip/testenv"
	"github.com/eip-project/eip/testenv/bench"
)

// The scale scenarios of make bench run here in a short version, so that
// they cannot rot: 100 IPs on 3 nodes from a cold start, then with every
// eipd at a tenth of a core, each with a mass failover, and 4 nodes with
// 50 IPs spread over the four and the failover of one; a node leaving and
// returning every 6 s with 200 IPs, whose locks' successors are not
// written again; then 5,000 IPs from a cold start with every eipd at a
// tenth of a core. Their speed is make bench's to measure; this checks
// what must hold at any speed, so also while other tests load the
// machine: every IP bound, none of the held addresses vanished (the
// benchmark watches every node over netlink), every IP of the killed node
// bound again on a survivor, and none answered from two MACs or bound on
// two live nodes.
func TestBenchScaleScenariosShort(t *testing.T) {
	t.Parallel()
	figs := runBench(t, "-only", "scale,nodes", "-scale", "100", "-starve", "10",
		"-nodes", "4", "-node-ips", "50", "-window", "3s", "-settle", "1s")
	for _, quota := range []string{"", ", eipd limited to 10 % of a core"} {
		cold := figs.get("cold start → all 100 IPs bound" + quota)
		assert.Check(t, is.Len(cold.Samples, 1), "%s: %s", cold.Name, cold.Note)
		figs.zero("held addresses that vanished, 100 IPs" + quota)
	}
	for _, what := range []string{"100 IPs on 3 nodes", "4 nodes, 50 IPs"} {
		moved := figs.get("mass failover, " + what + ": each of ")
		assert.Check(t, len(moved.Samples) > 0, "%s: %s", moved.Name, moved.Note)
		assert.Check(t, is.Contains(moved.Note, " 0 never bound again"), moved.Name)
		figs.zero("mass failover, " + what + ": IPs answered by two MACs or bound on two live nodes")
	}
	writes := figs.get("API server writes/s (every resource), 4 nodes, 50 IPs")
	assert.Check(t, is.Len(writes.Samples, 1), "%s: %s", writes.Name, writes.Note)
	// The four eipds joined before the Services came: the IPs are spread
	// by rank over every node, not taken by the first started.
	held := figs.get("IPs held per node at the window's end, 4 nodes, 50 IPs")
	assert.Check(t, is.Len(held.Samples, 4), "%s: %s", held.Name, held.Note)
	for _, n := range held.Samples {
		assert.Check(t, n > 0, "%s: %v", held.Name, held.Samples)
	}

	// A node that dies and returns every 6 s, with 200 IPs: its IPs are
	// taken over once, and no lock's successor is written again.
	figs = runBench(t, "-only", "churn", "-churn-ips", "200", "-window", "10s")
	churn := figs.get("lock successor rewrites, node-3 leaving and returning every 6s, 200 IPs, 20s")
	assert.Check(t, churn.Meets(), "%s: %v (%s)", churn.Name, churn.Samples, churn.Note)
	assert.Check(t, is.Contains(churn.Note, "3 cycles"), churn.Note)

	figs = runBench(t, "-only", "scale", "-scale", "5000", "-starve", "10", "-starved-only", "-window", "3s", "-settle", "1s")
	const starved = "5000 IPs, eipd limited to 10 % of a core"
	cold := figs.get("cold start → all 5000 IPs bound, eipd limited to 10 % of a core")
	assert.Check(t, is.Len(cold.Samples, 1), "%s: %s", cold.Name, cold.Note)
	figs.zero("held addresses that vanished, " + starved)
	// Each node binds about 1,700 IPs: it posts Events on Services within
	// its budget, and says how many it left out on its Node.
	posted := figs.get("Events eipd posted on Services per node, " + starved)
	assert.Check(t, is.Len(posted.Samples, 3), "%s: %s", posted.Name, posted.Note)
	assert.Check(t, posted.Meets(), "%s: at most %v, the budget over the run: %v (%s)", posted.Name, posted.Target.Limit, posted.Samples, posted.Note)
	left := figs.get("Events summarised on the Node per node, " + starved)
	for _, n := range left.Samples {
		assert.Check(t, n > 0, "%s: %v (%s)", left.Name, left.Samples, left.Note)
	}
}

// The graceful stop scenario of make bench, short: a node holding 300 IPs
// gets a SIGTERM and hands every IP off, each to a survivor within 1 s
// either way of its leaving (a failover would take a lease duration), and
// none is bound on two nodes at once.
func TestBenchGracefulStopShort(t *testing.T) {
	// Runs alone (no t.Parallel): an IP whose gap exceeds a hand-off (1 s)
	// counts as not handed off, a bound that other tests' load could blur.
	figs := runBench(t, "-only", "stop", "-stop-ips", "300")
	const stop = "graceful stop (SIGTERM) of node-1 holding 300 IPs"
	gaps := figs.get(stop + ": each IP's gap, stopped node → survivor")
	assert.Check(t, is.Len(gaps.Samples, 300), "%s: %s", gaps.Name, gaps.Note)
	figs.zero(stop + ": IPs not handed off")
	figs.zero(stop + ": IPs bound on two nodes at once")
}

// benchFigures are the figures of one benchmark run.
type benchFigures struct {
	t   *testing.T
	out []byte // what the run printed
	all []bench.Figure
}

// runBench runs scripts/bench.sh with args and reads its results.json.
func runBench(t *testing.T, args ...string) benchFigures {
	t.Helper()
	root, err := testenv.RepoRoot()
	assert.NilError(t, err)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "scripts/bench.sh", append(args, "-out", dir)...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	assert.NilError(t, err, "%s", out)
	b, err := os.ReadFile(filepath.Join(dir, "results.json"))
	assert.NilError(t, err)
	var res struct {
		Figures []bench.Figure `json:"figures"`
	}
	assert.NilError(t, json.Unmarshal(b, &res))
	return benchFigures{t: t, out: out, all: res.Figures}
}

// get is the figure whose name starts with name.
func (f benchFigures) get(name string) bench.Figure {
	f.t.Helper()
	for _, g := range f.all {
		if strings.HasPrefix(g.Name, name) {
			return g
		}
	}
	f.t.Fatalf("no figure %q in results.json; the table:\n%s", name, f.out)
	return bench.Figure{}
}

// zero checks that the figure named name is a single 0.
func (f benchFigures) zero(name string) {
	f.t.Helper()
	g := f.get(name)
	assert.Check(f.t, is.DeepEqual(g.Samples, []float64{0}), "%s (%s)", g.Name, g.Note)
}
