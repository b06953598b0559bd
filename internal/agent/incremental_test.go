package agent

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/golden"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/eip-project/eip/internal/lease"
)

// The loop runs a reconcile pass only for inputs that may change a decision
// (passDue, heartbeatsRenewed); every other input is answered without one.
// Over random sequences of inputs (ticks and renewals, peers renewing,
// falling silent and coming back, Services created and deleted, locks
// written by peers), whenever the loop skips a pass, a full pass run at
// that moment must act not at all: no API write, no address change. So the
// skipping loop reaches the decisions of a loop that passes on every input.
func TestSkippedPassesWouldActNot(t *testing.T) {
	for seed := range seeds(40) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { skippedPassesWouldActNot(t, seed) })
	}
}

func skippedPassesWouldActNot(t *testing.T, seed uint64) {
	rnd := rand.New(rand.NewPCG(seed, 15))
	w, rw := newRandomWorld(t, seed, []string{"node-b", "node-c", "node-d"}, 12)
	peers, silent := rw.peers, map[string]bool{}
	w.pass()
	passes, skipped := 0, 0
	// either runs the pass the loop decided on, or checks that a full
	// pass would not have acted.
	either := func(pass bool, what string) {
		if pass {
			passes++
			w.pass()
			return
		}
		skipped++
		w.take()
		// The check must not change what the loop remembers of its
		// last pass, or it would hide the loop's own mistakes.
		restore := snapshot(w.s)
		w.s.reconcile()
		restore()
		if calls := w.take(); len(calls) > 0 || len(w.s.writes.jobs) > 0 {
			t.Fatalf("seed %d: the loop skipped a pass after %s at %s, but a pass acts: %v, %d writes queued",
				seed, what, w.clk.Now().Sub(t0), calls, len(w.s.writes.jobs))
		}
	}
	for range 300 {
		// The timer was set before the clock moved.
		next := w.nextWake()
		w.step(time.Duration(rnd.IntN(300)) * time.Millisecond)
		if !next.IsZero() && !w.clk.Now().Before(next) {
			either(w.passDue(), "the timer")
		}
		switch r := rnd.IntN(20); {
		case r < 8: // the renew tick, then the renewal
			w.s.tick()
			either(w.passDue(), "the tick")
			select {
			case req := <-w.s.hbLine.req:
				// The fake API server puts the renewal in the cache
				// at once, so its watch event is answered first: the
				// other order has that event still waiting, which
				// runs the pass.
				sent := w.clk.Now()
				err := w.s.hb.renew(req)
				either(w.heartbeatEvent(), "our own heartbeat's event")
				w.s.self.renewed(renewResult{renewal: req, sent: sent, err: err}, w.s.clk.Now(), w.s.desired.cfg.RenewInterval)
				either(w.passDue(), "a renewal's result")
			default:
			}
		case r < 14: // the peers that are not silent renew
			for _, p := range peers {
				if !silent[p] {
					w.heartbeat(p, true)
					either(w.heartbeatEvent(), p+"'s renewal")
				}
			}
		case r < 15:
			p := peers[rnd.IntN(len(peers))]
			silent[p] = !silent[p]
		case r < 17:
			rw.addService()
			either(true, "a new Service")
		case r < 18 && len(rw.svcs) > 0:
			rw.deleteService(rnd.IntN(len(rw.svcs)))
			either(true, "a deleted Service")
		default: // a live peer takes a lock this node does not hold
			ip := testIP(rnd.IntN(rw.next))
			p := peers[rnd.IntN(len(peers))]
			if l := w.get(leaseName(ip)); !silent[p] && (l == nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != "node-a") {
				w.lock(ip, p)
				either(true, "a lock written by "+p)
			}
		}
	}
	if skipped == 0 || passes == 0 {
		t.Fatalf("seed %d: %d passes, %d skipped: the sequence did not exercise both", seed, passes, skipped)
	}
	assertTrace(t, w, fmt.Sprintf("skipped-%02d", seed))
}

// assertTrace compares the world's whole trace with its golden file
// (testdata/trace/NAME.golden; go test -update writes them).
func assertTrace(t *testing.T, w *world, name string) {
	t.Helper()
	golden.Assert(t, strings.Join(canonicalTrace(w.trace), "\n")+"\n", filepath.Join("trace", name+".golden"))
}

// canonicalTrace orders the effects that the loop made on several IPs in
// one instant by IP, keeping each IP's own effects in the order they came:
// the loop walks maps, so which of two IPs it acts on first is not
// behaviour, but an unbind before its lock's hand-off is. A line that names
// no IP (a renewal) stays where it is and bounds the runs it sorts.
func canonicalTrace(trace []string) []string {
	out := slices.Clone(trace)
	ipOf := func(line string) (at, ip string) {
		at, rest, _ := strings.Cut(line, " ")
		for _, f := range strings.Fields(rest) {
			if a, err := netip.ParseAddr(f); err == nil {
				return at, a.String()
			}
			if n, ok := strings.CutPrefix(f, "eip-"); ok && n != "" {
				return at, n
			}
		}
		return at, ""
	}
	key := func(line string) string {
		at, ip := ipOf(line)
		if a, err := netip.ParseAddr(ip); err == nil {
			ip = lease.NameFor(a)[len("eip-"):]
		}
		return at + " " + ip
	}
	for i := 0; i < len(out); {
		at, ip := ipOf(out[i])
		j := i + 1
		for ip != "" && j < len(out) {
			if at2, ip2 := ipOf(out[j]); at2 != at || ip2 == "" {
				break
			}
			j++
		}
		slices.SortStableFunc(out[i:j], func(a, b string) int { return strings.Compare(key(a), key(b)) })
		i = j
	}
	return out
}

// randomWorld is node-a with live peers and Services named svc-N, each
// naming testIP(N), for the random sequences below.
type randomWorld struct {
	w     *world
	peers []string
	next  int      // the next Service's N
	svcs  []string // the Services that exist
}

// newRandomWorld runs odd seeds at the tuned lease, whose expiry has a
// grace.
func newRandomWorld(t *testing.T, seed uint64, peers []string, services int) (*world, *randomWorld) {
	cfg := defaultTestConfig()
	if seed%2 == 1 {
		cfg["lease-duration"], cfg["renew-interval"] = "1s", "250ms"
	}
	w := newWorld(t, "node-a", cfg)
	for _, p := range peers {
		w.addNode(p)
		w.heartbeat(p, true)
	}
	r := &randomWorld{w: w, peers: peers}
	for range services {
		r.addService()
	}
	return w, r
}

func (r *randomWorld) deleteService(k int) {
	r.w.deleteService(r.svcs[k])
	r.svcs = slices.Delete(r.svcs, k, k+1)
	r.w.s.sched.dirtySvc = true
}

func (r *randomWorld) addService() {
	name := fmt.Sprintf("svc-%d", r.next)
	r.w.addService(name, testIP(r.next))
	r.svcs = append(r.svcs, name)
	r.next++
}

// Between full passes the loop decides again only the IPs whose lock,
// write or own decision time changed, or whose decision depends on
// whether this node may write when that changed (reconcileSome). Over
// random sequences of inputs (Services created and deleted, peers taking
// and deleting locks, falling silent and coming back, this node's writes
// answered late and in any order, some lost to a peer's race or timed
// out, two writers so that acquisitions wait for room, renewals refused), after every input the loop
// answers as it would, and then a full pass must act not at all: no API
// write, no address change. So the incremental loop reaches the decisions
// of a loop that passes over every IP on every input.
func TestIncrementalPassDecidesAsTheFullPass(t *testing.T) {
	for seed := range seeds(60) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { incrementalDecidesAsFull(t, seed) })
	}
}

// seeds is how many random sequences a property test replays: n, or
// with -short a few. The race tier of make test runs -short: the race
// detector slows these tests tenfold, and a few sequences run every
// goroutine the loop starts.
func seeds(n uint64) uint64 {
	if testing.Short() {
		return min(n, 6)
	}
	return n
}

func incrementalDecidesAsFull(t *testing.T, seed uint64) {
	rnd := rand.New(rand.NewPCG(seed, 16))
	w, rw := newRandomWorld(t, seed, []string{"node-b", "node-c"}, 30)
	w.setWriters(2)
	peers, silent := rw.peers, map[string]bool{}
	var jobs []write // taken from the loop, not yet answered
	takeJobs := func() {
		for more := true; more; {
			select {
			case j := <-w.s.writes.jobs:
				jobs = append(jobs, j)
			default:
				more = false
			}
		}
	}
	incremental, checks := 0, 0
	// check runs a full pass on a copy of what the loop remembers and
	// requires it to act not at all, then puts the loop's memory back.
	check := func(what string) {
		t.Helper()
		takeJobs()
		w.take()
		checks++
		restore := snapshot(w.s)
		w.s.reconcile()
		calls, queued := w.take(), len(w.s.writes.jobs)
		restore()
		if len(calls) > 0 || queued > 0 {
			t.Fatalf("seed %d: after %s at %s the loop left something a full pass does: %v, %d writes",
				seed, what, w.clk.Now().Sub(t0), calls, queued)
		}
	}
	// loop answers an input as the owner loop does.
	loop := func(pass bool, what string) {
		if pass {
			if !w.fullDue() {
				incremental++
			}
			w.s.pass()
		}
		check(what)
	}
	w.s.reconcile()
	for range 400 {
		next := w.nextWake()
		w.step(time.Duration(rnd.IntN(200)) * time.Millisecond)
		if !next.IsZero() && !w.clk.Now().Before(next) {
			loop(w.passDue(), "the timer")
		}
		switch r := rnd.IntN(24); {
		case r < 5: // the tick, and our renewal answered at once, or refused
			w.s.tick()
			loop(w.passDue(), "the tick")
			w.apiDown = rnd.IntN(4) == 0
			if w.renew() {
				loop(true, "a renewal")
			}
			w.apiDown = false
		case r < 9: // the peers that are not silent renew
			for _, p := range peers {
				if !silent[p] {
					w.heartbeat(p, true)
				}
			}
			w.s.sched.hbDirty = true
			loop(true, "peers' renewals")
		case r < 10:
			p := peers[rnd.IntN(len(peers))]
			silent[p] = !silent[p]
		case r < 16 && len(jobs) > 0: // a write of ours is answered
			k := rnd.IntN(len(jobs))
			j := jobs[k]
			jobs = slices.Delete(jobs, k, k+1)
			res := writeResult{write: j, err: apierrors.NewTimeoutError("no answer", 1)}
			if rnd.IntN(5) > 0 { // else timed out, nothing written
				res = w.answer(j)
			}
			w.s.writeDone(res)
			loop(true, "a write's result ("+j.action.String()+")")
		case r < 18:
			rw.addService()
			loop(true, "a new Service")
		case r < 19 && len(rw.svcs) > 0:
			rw.deleteService(rnd.IntN(len(rw.svcs)))
			loop(true, "a deleted Service")
		case r < 22: // a live peer takes an IP this node neither holds nor writes
			ip := testIP(rnd.IntN(rw.next))
			p := peers[rnd.IntN(len(peers))]
			l := w.get(leaseName(ip))
			if !silent[p] && !w.s.writes.inflight[leaseName(ip)] && (l == nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != "node-a") {
				w.lock(ip, p)
				loop(true, "a lock written by "+p)
			}
		default: // a peer deletes a lock it holds
			ip := testIP(rnd.IntN(rw.next))
			if l := w.get(leaseName(ip)); l != nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "node-a" {
				w.must(w.leases.Delete(l))
				w.leaseChanged(l)
				loop(true, "a lock deleted by its holder")
			}
		}
	}
	if incremental == 0 || checks == 0 {
		t.Fatalf("seed %d: %d incremental passes, %d checks: the sequence did not exercise the incremental pass", seed, incremental, checks)
	}
	assertTrace(t, w, fmt.Sprintf("incremental-%02d", seed))
}

// A mass failover answered the way the loop answers it: 400 IPs of a
// peer that dies, two writers, each write result answered with a pass of
// the loop's choosing and full passes only when the loop asks for one.
// Every IP is taken over and bound, each with one write.
func TestIncrementalMassFailoverTakesEveryIP(t *testing.T) {
	const n = 400
	w := heldByNodeC(t, 2, n, "node-c")
	full := 0
	for range 200 { // node-c is silent from now on
		w.step(50 * time.Millisecond)
		if w.clk.Now().Sub(w.s.self.lastTick) >= w.s.desired.cfg.RenewInterval {
			w.s.tick()
			if w.renew() && w.heartbeatsRenewed() { // our renewal's watch event
				w.s.sched.needFull = true
				full++
				w.s.pass()
			}
		}
		if w.passDue() {
			full += boolInt(w.fullDue())
			w.s.pass()
		}
		for more := true; more; {
			select {
			case j := <-w.s.writes.jobs:
				w.s.writeDone(w.answer(j))
				full += boolInt(w.fullDue())
				w.s.pass()
			default:
				more = false
			}
		}
	}
	calls := w.take()
	if len(w.addrs) != n || len(calls) != 2*n {
		t.Fatalf("%d of %d IPs bound after 10 s, %d calls", len(w.addrs), n, len(calls))
	}
	if full > 40 {
		t.Fatalf("%d full passes for %d write results", full, n)
	}
	assertTrace(t, w, "mass-failover")
}

// heldByNodeC is node-a's loop with writers lock writers, settled with
// peers, of which node-c holds the n IPs there are, each naming node-a
// its successor.
func heldByNodeC(t *testing.T, writers, n int, peers ...string) *world {
	w := newWorld(t, "node-a", defaultTestConfig())
	w.setWriters(writers)
	for _, p := range peers {
		w.addNode(p)
		w.heartbeat(p, true)
	}
	for i := range n {
		w.lockNaming(testIP(i), "node-c", "node-a")
		w.addService(fmt.Sprintf("svc-%d", i), testIP(i))
	}
	w.pass()
	for range 4 {
		w.tick(peers...)
	}
	w.take()
	return w
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// A mass failover on a loaded machine, where a full pass takes longer than
// half a lease (0.9 s of the fake clock here, as a 10,000-IP pass took on
// the loaded test bed) and a renewal 200 ms: the renewal the tick sends
// during a full pass comes back too late to keep this node writable. A
// change of whether it may write decides again only the IPs that depend
// on it; when it ran a full pass, the next change came during that one,
// and the loop spent the failover in full passes, taking one window of
// IPs between two of them. Here node-a, their successor, takes over
// node-c's 100 IPs with four writers in 30 s of the loop's time, with no full pass beyond the
// one for node-c's death (and the very first).
func TestLoopSlowFullPassesDoNotFeedThemselves(t *testing.T) {
	const n = 100
	w := heldByNodeC(t, 4, n, "node-b", "node-c")
	type answer struct {
		res write
		at  time.Time
	}
	var writes []answer
	var renewal *renewal
	var renewalSent time.Time
	start, full := w.clk.Now(), 0
	// Until every IP is bound, and written: node-a, their successor, binds
	// before its writes come back. node-c is silent from now on.
	for w.clk.Now().Sub(start) < 30*time.Second && (len(w.addrs) < n || len(writes) > 0 || len(w.s.writes.inflight) > 0) {
		now := w.clk.Now()
		if now.Sub(w.s.self.lastTick) >= w.s.desired.cfg.RenewInterval {
			w.s.tick()
			w.heartbeat("node-b", true) // in step with this node
			w.s.sched.hbDirty = true
		}
		if renewal == nil {
			select {
			case r := <-w.s.hbLine.req:
				renewal, renewalSent = &r, now
			default:
			}
		}
		if renewal != nil && now.Sub(renewalSent) >= 200*time.Millisecond {
			err := w.s.hb.renew(*renewal)
			w.s.self.renewed(renewResult{renewal: *renewal, sent: renewalSent, err: err}, w.s.clk.Now(), w.s.desired.cfg.RenewInterval)
			w.s.sched.hbDirty, renewal = true, nil
		}
		for more := true; more; {
			select {
			case j := <-w.s.writes.jobs:
				writes = append(writes, answer{j, now.Add(100 * time.Millisecond)})
			default:
				more = false
			}
		}
		for len(writes) > 0 && !now.Before(writes[0].at) {
			w.s.writeDone(w.answer(writes[0].res))
			writes = writes[1:]
		}
		last := w.s.sched.lastPass
		w.s.pass()
		if w.s.sched.lastPass != last {
			full++
			w.step(900 * time.Millisecond)
			continue
		}
		w.step(10 * time.Millisecond)
	}
	if calls := w.take(); len(w.addrs) != n || len(calls) != 2*n {
		t.Fatalf("%d of node-c's %d IPs bound after %s, %d calls, %d full", len(w.addrs), n, w.clk.Now().Sub(start), len(calls), full)
	}
	if full > 1 {
		t.Fatalf("%d full passes in the failover, want only the one for node-c's death", full)
	}
	assertTrace(t, w, "slow-full-passes")
}
