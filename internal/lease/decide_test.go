package lease_test

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/eip-project/eip/internal/lease"
)

const (
	step     = 100 * time.Millisecond
	lateStep = 2 * time.Second
)

// now is when every decision below is taken.
func now() time.Time { return at(10 * time.Second) }

// decideView is node "a"'s view: a, b and c are live and eligible; x died
// 50 ms ago, y a second ago; ghost was never seen.
func decideView() lease.View {
	dead := map[string]time.Time{"x": now().Add(-50 * ms), "y": now().Add(-time.Second)}
	return lease.View{
		Self: "a", Now: now(), Writable: true, Eligible: true,
		Live:  []string{"a", "b", "c"},
		Alive: func(n string) bool { return n == "a" || n == "b" || n == "c" },
		DeadSince: func(n string) (time.Time, bool) {
			t, ok := dead[n]
			return t, ok
		},
		Step: step, LateStep: lateStep, SuccessorWait: successorWait,
	}
}

// successorWait is decideView's SuccessorWait: a lease duration of 1 s
// and a probe window of 60 ms.
const successorWait = time.Second + 60*ms

// ipRanked returns an IP for which node a has the given rank among a, b, c.
func ipRanked(t *testing.T, rank int) netip.Addr {
	t.Helper()
	for i := 1; i < 255; i++ {
		ip := netip.AddrFrom4([4]byte{198, 18, 0, byte(i)})
		if lease.Rank(ip, "a", []string{"a", "b", "c"}) == rank {
			return ip
		}
	}
	t.Fatalf("no IP gives a rank %d", rank)
	return netip.Addr{}
}

// lock is a lock naming holder and a pending move; one that a names as
// holder names b, live, as its successor, as a's own write would.
func lock(holder, moveTo string) *lease.Lock {
	lk := &lease.Lock{Holder: holder, MoveTo: moveTo, ResourceVersion: "5"}
	if holder == "a" {
		lk.Successor = "b"
	}
	return lk
}

// decideCase is one decision a table expects: of ip, in decideView
// changed by view if not nil.
type decideCase struct {
	name   string
	view   func(*lease.View)
	ip     lease.IP
	action lease.Action
	target string
	at     time.Time
	// successor, when set, is the successor the decision names.
	successor string
}

// check checks the decision: its action, target and time, with a reason.
func (tc decideCase) check(t *testing.T) {
	t.Helper()
	v := decideView()
	if tc.view != nil {
		tc.view(&v)
	}
	d := lease.Decide(v, tc.ip)
	assert.Equal(t, d.Action, tc.action, "reason: %s", d.Reason)
	assert.Equal(t, d.Target, tc.target)
	assert.Equal(t, d.At, tc.at)
	assert.Assert(t, d.Reason != "")
	if tc.successor != "" {
		assert.Equal(t, d.Successor, tc.successor)
	}
}

func TestDecide(t *testing.T) {
	r0, r1, r2 := ipRanked(t, 0), ipRanked(t, 1), ipRanked(t, 2)
	notWritable := func(v *lease.View) { v.Writable = false }
	notEligible := func(v *lease.View) { v.Eligible = false; v.Live = []string{"b", "c"} }
	freeSince := func(d time.Duration) time.Time { return now().Add(-d) }
	wireRepair := func(v *lease.View) { v.WireRepair = 5 * time.Second }

	for _, tc := range []decideCase{
		// IPs no Service names.
		{name: "orphan without lock", ip: lease.IP{Addr: r0}, action: lease.None},
		{name: "orphan without lock, bound", ip: lease.IP{Addr: r0, Bound: true}, action: lease.Unbind},
		{name: "orphan held here", ip: lease.IP{Addr: r1, Lock: lock("a", ""), Bound: true}, action: lease.Delete},
		{name: "orphan held here, not writable", view: notWritable, ip: lease.IP{Addr: r1, Lock: lock("a", ""), Bound: true}, action: lease.Unbind},
		{name: "orphan held here, not writable, unbound", view: notWritable, ip: lease.IP{Addr: r0, Lock: lock("a", "")}, action: lease.None},
		{name: "orphan held elsewhere, bound here", ip: lease.IP{Addr: r0, Lock: lock("b", ""), Bound: true}, action: lease.Unbind},
		{name: "orphan of a live holder", ip: lease.IP{Addr: r0, Lock: lock("b", "")}, action: lease.None},
		{name: "orphan of a dead holder, top rank", ip: lease.IP{Addr: r0, Lock: lock("x", "")}, action: lease.Delete},
		{name: "orphan of a dead holder, rank 1", ip: lease.IP{Addr: r1, Lock: lock("x", "")}, action: lease.None},
		{name: "free orphan, top rank", ip: lease.IP{Addr: r0, Lock: lock("", "")}, action: lease.Delete},
		{name: "free orphan, rank 2", ip: lease.IP{Addr: r2, Lock: lock("", "")}, action: lease.None},
		{name: "orphan, top rank, not eligible", view: notEligible, ip: lease.IP{Addr: r0, Lock: lock("x", "")}, action: lease.Delete},

		// Named IPs without a lock: create after rank × step.
		{name: "no lock, top rank", ip: lease.IP{Addr: r0, Named: true, FreeSince: now()}, action: lease.Create},
		{name: "no lock, rank 2, early", ip: lease.IP{Addr: r2, Named: true, FreeSince: freeSince(150 * ms)}, action: lease.None, at: now().Add(50 * ms)},
		{name: "no lock, rank 2, due", ip: lease.IP{Addr: r2, Named: true, FreeSince: freeSince(200 * ms)}, action: lease.Create},
		{name: "no lock, planned here", ip: lease.IP{Addr: r2, Named: true, FreeSince: now(), Planned: "a"}, action: lease.Create},
		{name: "no lock, planned for live b", ip: lease.IP{Addr: r0, Named: true, FreeSince: now(), Planned: "b"}, action: lease.None, at: now().Add(step)},
		{name: "no lock, planned for dead x", ip: lease.IP{Addr: r0, Named: true, FreeSince: now(), Planned: "x"}, action: lease.Create},
		{name: "no lock, bound while waiting", ip: lease.IP{Addr: r2, Named: true, FreeSince: now(), Bound: true}, action: lease.Unbind},
		{name: "no lock, bound, top rank", ip: lease.IP{Addr: r0, Named: true, FreeSince: now(), Bound: true}, action: lease.Create},
		{name: "no lock, not writable", view: notWritable, ip: lease.IP{Addr: r0, Named: true, FreeSince: freeSince(time.Hour)}, action: lease.None},
		{name: "no lock, not eligible", view: notEligible, ip: lease.IP{Addr: r0, Named: true, FreeSince: freeSince(time.Hour)}, action: lease.None},

		// Held here.
		{name: "held, unbound", ip: lease.IP{Addr: r1, Named: true, Lock: lock("a", "")}, action: lease.Bind},
		{name: "held, bound", ip: lease.IP{Addr: r1, Named: true, Lock: lock("a", ""), Bound: true}, action: lease.None},
		{name: "held, move to live b", ip: lease.IP{Addr: r0, Named: true, Lock: lock("a", "b"), Bound: true}, action: lease.Handoff, target: "b"},
		{name: "held, move here", ip: lease.IP{Addr: r0, Named: true, Lock: lock("a", "a"), Bound: true}, action: lease.ClearMove},
		{name: "held, move to dead x", ip: lease.IP{Addr: r0, Named: true, Lock: lock("a", "x"), Bound: true}, action: lease.ClearMove},
		{name: "held, move to unknown node", ip: lease.IP{Addr: r0, Named: true, Lock: lock("a", "ghost"), Bound: true}, action: lease.ClearMove},
		{name: "held, move pending, not writable", view: notWritable, ip: lease.IP{Addr: r0, Named: true, Lock: lock("a", "b"), Bound: true}, action: lease.None},
		{name: "held, policy wants c", ip: lease.IP{Addr: r0, Named: true, Lock: lock("a", ""), Bound: true, Planned: "c"}, action: lease.Handoff, target: "c"},
		{name: "held, policy wants dead x", ip: lease.IP{Addr: r0, Named: true, Lock: lock("a", ""), Bound: true, Planned: "x"}, action: lease.None},
		{name: "held, policy wants it here", ip: lease.IP{Addr: r0, Named: true, Lock: lock("a", ""), Planned: "a"}, action: lease.Bind},
		{name: "held, policy wants c, not writable", view: notWritable, ip: lease.IP{Addr: r0, Named: true, Lock: lock("a", ""), Bound: true, Planned: "c"}, action: lease.None},
		{name: "held, not eligible", view: notEligible, ip: lease.IP{Addr: r0, Named: true, Lock: lock("a", ""), Bound: true}, action: lease.Handoff, target: lease.Order(r0, []string{"b", "c"})[0]},
		{name: "held, bound, owner unrecorded", ip: lease.IP{Addr: r1, Named: true, Lock: lock("a", ""), Bound: true, Unrecorded: true}, action: lease.RecordOwner},
		{name: "held, bound, owner unrecorded, not writable", view: notWritable, ip: lease.IP{Addr: r1, Named: true, Lock: lock("a", ""), Bound: true, Unrecorded: true}, action: lease.None},
		{name: "held, unbound, owner unrecorded: bind first", ip: lease.IP{Addr: r1, Named: true, Lock: lock("a", ""), Unrecorded: true}, action: lease.Bind},
		{name: "held, owner unrecorded, move to live b first", ip: lease.IP{Addr: r0, Named: true, Lock: lock("a", "b"), Bound: true, Unrecorded: true}, action: lease.Handoff, target: "b"},
		{name: "held by b, owner unrecorded", ip: lease.IP{Addr: r0, Named: true, Lock: lock("b", ""), Unrecorded: true}, action: lease.None},
		{name: "held, not eligible, no peer", view: func(v *lease.View) { v.Eligible = false; v.Live = nil }, ip: lease.IP{Addr: r0, Named: true, Lock: lock("a", ""), Bound: true}, action: lease.None},

		// Held here, and its successor b hears no answer on the wire.
		{name: "held, unheard, re-announced", view: wireRepair, ip: lease.IP{Addr: r0, Named: true, Lock: lock("a", ""), Bound: true, Unheard: now().Add(-time.Second)}, action: lease.None, at: now().Add(4 * time.Second)},
		{name: "held, unheard after re-announcing", view: wireRepair, ip: lease.IP{Addr: r0, Named: true, Lock: lock("a", ""), Bound: true, Unheard: now().Add(-5 * time.Second)}, action: lease.Handoff, target: "b"},
		{name: "held, unheard, not writable", view: func(v *lease.View) { wireRepair(v); v.Writable = false }, ip: lease.IP{Addr: r0, Named: true, Lock: lock("a", ""), Bound: true, Unheard: now().Add(-time.Minute)}, action: lease.None},
		{name: "held, unheard, move to c first", view: wireRepair, ip: lease.IP{Addr: r0, Named: true, Lock: lock("a", "c"), Bound: true, Unheard: now().Add(-time.Minute)}, action: lease.Handoff, target: "c"},
		{name: "held, unheard by a dead successor", view: wireRepair, ip: lease.IP{Addr: r0, Named: true, Lock: &lease.Lock{Holder: "a", Successor: "x"}, Bound: true, Unheard: now().Add(-time.Minute)}, action: lease.NameSuccessor},
		{name: "held, unheard, successor may not hold it", view: wireRepair, ip: lease.IP{Addr: r0, Named: true, Lock: lock("a", ""), Bound: true, Unheard: now().Add(-time.Minute), Only: lease.Only{Restricted: true, Nodes: []string{"a", "c"}}}, action: lease.NameSuccessor, successor: "c"},
		{name: "held, unheard, unbound", view: wireRepair, ip: lease.IP{Addr: r0, Named: true, Lock: lock("a", ""), Unheard: now().Add(-time.Minute)}, action: lease.Bind},

		// Held elsewhere or free.
		{name: "held by b, bound here", ip: lease.IP{Addr: r0, Named: true, Lock: lock("b", ""), Bound: true}, action: lease.Unbind},
		{name: "free, bound here", ip: lease.IP{Addr: r0, Named: true, Lock: lock("", ""), Bound: true}, action: lease.Unbind},
		{name: "held by b, bound here, not writable", view: notWritable, ip: lease.IP{Addr: r0, Named: true, Lock: lock("b", ""), Bound: true}, action: lease.Unbind},
		{name: "held by live b", ip: lease.IP{Addr: r0, Named: true, Lock: lock("b", "")}, action: lease.None},
		{name: "free, top rank", ip: lease.IP{Addr: r0, Named: true, Lock: lock("", ""), FreeSince: now()}, action: lease.Acquire},
		{name: "free, rank 1, early", ip: lease.IP{Addr: r1, Named: true, Lock: lock("", ""), FreeSince: freeSince(30 * ms)}, action: lease.None, at: now().Add(70 * ms)},
		{name: "free, rank 1, due", ip: lease.IP{Addr: r1, Named: true, Lock: lock("", ""), FreeSince: freeSince(step)}, action: lease.Acquire},
		{name: "free, planned here", ip: lease.IP{Addr: r2, Named: true, Lock: lock("", ""), FreeSince: now(), Planned: "a"}, action: lease.Acquire},
		{name: "free, moved here", ip: lease.IP{Addr: r2, Named: true, Lock: lock("", "a"), FreeSince: now()}, action: lease.Acquire},
		{name: "dead holder, top rank", ip: lease.IP{Addr: r0, Named: true, Lock: lock("x", "")}, action: lease.Acquire},
		{name: "dead holder, rank 1, early", ip: lease.IP{Addr: r1, Named: true, Lock: lock("x", "")}, action: lease.None, at: now().Add(50 * ms)},
		{name: "dead holder, rank 1, due", ip: lease.IP{Addr: r1, Named: true, Lock: lock("y", "")}, action: lease.Acquire},
		// Rank 2, and one more as the policy chose b: beyond the Racers, so a
		// write's timeout after rank 2's turn.
		{name: "dead holder, rank 2, planned for b", ip: lease.IP{Addr: r2, Named: true, Lock: lock("x", ""), Planned: "b"}, action: lease.None, at: now().Add(-50*ms + 2*step + lateStep)},
		// A holder this node never saw has no death time: every node tries at once.
		{name: "never-seen holder, rank 2", ip: lease.IP{Addr: r2, Named: true, Lock: lock("ghost", "")}, action: lease.Acquire},
		{name: "dead holder, moved here", ip: lease.IP{Addr: r2, Named: true, Lock: lock("x", "a")}, action: lease.Acquire},
		{name: "dead holder, not writable", view: notWritable, ip: lease.IP{Addr: r0, Named: true, Lock: lock("y", "")}, action: lease.None},
		{name: "dead holder, not eligible", view: notEligible, ip: lease.IP{Addr: r0, Named: true, Lock: lock("y", "")}, action: lease.None},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.check(t) })
	}
}

// Whatever the view, Decide never binds an IP whose lock does not name this
// node, as holder or as the successor of a dead holder, and a node that
// is bound but holds it in neither way always unbinds (or deletes the
// lock of an orphan, which unbinds first).
func TestDecideNeverBindsWhatItDoesNotHold(t *testing.T) {
	ip := ipRanked(t, 0)
	for _, holder := range []string{"", "b", "x", "ghost"} {
		for _, successor := range []string{"", "a", "b", "c", "x"} {
			for _, moveTo := range []string{"", "a"} {
				for _, named := range []bool{true, false} {
					for _, writable := range []bool{true, false} {
						v := decideView()
						v.Writable = writable
						for _, bound := range []bool{true, false} {
							lk := lock(holder, moveTo)
							lk.Successor = successor
							d := lease.Decide(v, lease.IP{Addr: ip, Named: named, Bound: bound, Lock: lk, Planned: "a"})
							succeeds := named && successor == "a" && moveTo == "" && (holder == "x" || holder == "ghost")
							assert.Assert(t, d.Action != lease.Bind, "holder %q: %s", holder, d.Reason)
							assert.Assert(t, d.Action != lease.Succeed || succeeds && writable, "holder %q successor %q: %s", holder, successor, d.Reason)
							if bound && !succeeds {
								// A Delete unbinds first, as every write giving an IP away.
								assert.Assert(t, d.Action == lease.Unbind || d.Action == lease.Delete && !named,
									"holder %q named %v writable %v: %s %s", holder, named, writable, d.Action, d.Reason)
							}
							if bound && succeeds {
								assert.Assert(t, d.Action != lease.Unbind, "a successor keeps what it bound: %s", d.Reason)
							}
						}
					}
				}
			}
		}
	}
}

func TestBestPeer(t *testing.T) {
	v := decideView()
	ip := ipRanked(t, 0)
	assert.Equal(t, v.BestPeer(ip), lease.Order(ip, []string{"b", "c"})[0])
	v.Live = []string{"a"}
	assert.Equal(t, v.BestPeer(ip), "")
}

func TestActionString(t *testing.T) {
	for a, want := range map[lease.Action]string{
		lease.None: "none", lease.Bind: "bind", lease.Unbind: "unbind", lease.Create: "create",
		lease.Acquire: "acquire", lease.Handoff: "handoff", lease.Release: "release",
		lease.Delete: "delete", lease.ClearMove: "clear-move", lease.Succeed: "succeed",
		lease.NameSuccessor: "name-successor", lease.RecordOwner: "record-owner",
	} {
		assert.Equal(t, a.String(), want)
	}
}

func TestFenced(t *testing.T) {
	fenceAfter := 1500 * ms
	assert.Assert(t, !lease.Fenced(time.Time{}, at(time.Hour), fenceAfter), "never renewed: nothing to fence yet")
	assert.Assert(t, !lease.Fenced(at(0), at(fenceAfter-ms), fenceAfter))
	assert.Assert(t, lease.Fenced(at(0), at(fenceAfter), fenceAfter))
}

// Until this node knows its live peers it races for nothing, and ranks
// count from then, not from when it first saw an IP free.
func TestDecideWaitsToKnowItsPeers(t *testing.T) {
	r0, r1 := ipRanked(t, 0), ipRanked(t, 1)
	v := decideView()
	v.PeersKnown = now().Add(200 * ms)

	d := lease.Decide(v, lease.IP{Addr: r0, Named: true, FreeSince: now().Add(-time.Second)})
	assert.Equal(t, d.Action, lease.None)
	assert.Equal(t, d.At, v.PeersKnown)
	d = lease.Decide(v, lease.IP{Addr: r0, Named: true, Lock: lock("x", "")})
	assert.Equal(t, d.Action, lease.None, "a dead holder's IP waits too")
	assert.Equal(t, d.At, v.PeersKnown)
	d = lease.Decide(v, lease.IP{Addr: r1, Named: true, Lock: lock("a", ""), Bound: true})
	assert.Equal(t, d.Action, lease.None, "what this node holds is not raced for")

	v.Now = v.PeersKnown
	d = lease.Decide(v, lease.IP{Addr: r0, Named: true, FreeSince: now().Add(-time.Second)})
	assert.Equal(t, d.Action, lease.Create)
	d = lease.Decide(v, lease.IP{Addr: r1, Named: true, FreeSince: now().Add(-time.Second)})
	assert.Equal(t, d.Action, lease.None)
	assert.Equal(t, d.At, v.PeersKnown.Add(step), "rank 1 waits one step from when the peers were known")
}

// When one of fifty nodes dies, the first Racers survivors race for each of
// its IPs a step apart, and the others only a write's timeout after the one
// before them: a late rank races only when all before it failed to act.
func TestDeadHoldersIPIsRacedByTheFirstRanks(t *testing.T) {
	live := make([]string, 49)
	for i := range live {
		live[i] = fmt.Sprintf("node-%02d", i)
	}
	dead := now().Add(-time.Hour)
	ip := lease.IP{Addr: netip.MustParseAddr("198.18.0.7"), Named: true, Lock: lock("gone", "")}
	waits := make([]time.Duration, len(live))
	for _, self := range live {
		v := lease.View{
			Self: self, Now: dead, Writable: true, Eligible: true, Live: live,
			Alive:     func(n string) bool { return n != "gone" },
			DeadSince: func(string) (time.Time, bool) { return dead, true },
			Step:      step, LateStep: lateStep,
		}
		d := lease.Decide(v, ip)
		wait := d.At.Sub(dead)
		if d.Action == lease.Acquire {
			wait = 0
		}
		waits[lease.Rank(ip.Addr, self, live)] = wait
	}
	want := []time.Duration{0, step, 2 * step, 2*step + lateStep, 2*step + 2*lateStep}
	assert.DeepEqual(t, waits[:len(want)], want)
	assert.Equal(t, waits[48], 2*step+46*lateStep)
}

// A decision says it read Writable exactly when it would be another
// (action, target or time) were Writable the other way: the loop decides
// again, when that changes, only those IPs. Over every combination of
// lock, holder, move, naming, binding, eligibility, plan and free time.
func TestDecideSaysWhetherItReadWritable(t *testing.T) {
	holders := []string{"", "a", "b", "x", "ghost"}
	planned := []string{"", "a", "b"}
	frees := []time.Time{{}, now().Add(-time.Minute), now()}
	n := 0
	for _, hasLock := range []bool{false, true} {
		for _, holder := range holders {
			for _, moveTo := range []string{"", "a", "b", "x"} {
				for _, successor := range []string{"", "a", "b", "x"} {
					for _, named := range []bool{false, true} {
						for _, unrecorded := range []bool{false, true} {
							for _, bound := range []bool{false, true} {
								for _, eligible := range []bool{false, true} {
									for _, p := range planned {
										for _, free := range frees {
											ip := lease.IP{Addr: ipRanked(t, 1), Named: named, Bound: bound, Planned: p, FreeSince: free, Unrecorded: unrecorded}
											if hasLock {
												ip.Lock = lock(holder, moveTo)
												ip.Lock.Successor = successor
											}
											v := decideView()
											v.Eligible = eligible
											d := lease.Decide(v, ip)
											v.Writable = false
											o := lease.Decide(v, ip)
											assert.Equal(t, d.ReadWritable, o.ReadWritable, "%+v", ip)
											differ := d.Action != o.Action || d.Target != o.Target || d.Successor != o.Successor || !d.At.Equal(o.At)
											assert.Equal(t, d.ReadWritable, differ, "%+v eligible=%v: %+v against %+v", ip, eligible, d, o)
											if !differ {
												n++
											}
										}
									}
								}
							}
						}
					}
				}
			}
		}
	}
	assert.Assert(t, n > 0, "no decision stood whatever Writable was")
}

// An IP restricted to some nodes (externalTrafficPolicy: Local, package
// endpoints) lives only on them: the others never race for it, and a
// holder it leaves out hands it to one that is live, or releases it.
func TestDecideOnlyWhereAllowed(t *testing.T) {
	r0, r2 := ipRanked(t, 0), ipRanked(t, 2)
	only := func(nodes ...string) lease.Only { return lease.Only{Restricted: true, Nodes: nodes} }
	notWritable := func(v *lease.View) { v.Writable = false }
	for _, tc := range []decideCase{
		{name: "no lock, top rank, not allowed", ip: lease.IP{Addr: r0, Named: true, FreeSince: now(), Only: only("b")}, action: lease.None},
		{name: "no lock, rank 2 of all, first of those allowed", ip: lease.IP{Addr: r2, Named: true, FreeSince: now(), Only: only("a", "x")}, action: lease.Create},
		{name: "free, no node allowed", ip: lease.IP{Addr: r0, Named: true, Lock: lock("", ""), FreeSince: now().Add(-time.Hour), Only: only()}, action: lease.None},
		{name: "free, planned for a node not allowed", ip: lease.IP{Addr: r2, Named: true, Lock: lock("", ""), FreeSince: now(), Planned: "b", Only: only("a")}, action: lease.Acquire},
		{name: "dead holder, allowed here only", ip: lease.IP{Addr: r2, Named: true, Lock: lock("x", ""), Only: only("a")}, action: lease.Acquire},
		{name: "held, allowed", ip: lease.IP{Addr: r0, Named: true, Lock: lock("a", ""), Bound: true, Only: only("a", "b")}, action: lease.None},
		{name: "held, not allowed: hand-off to the allowed node", ip: lease.IP{Addr: r0, Named: true, Lock: lock("a", ""), Bound: true, Only: only("c")}, action: lease.Handoff, target: "c"},
		{name: "held, not allowed, plan names another not allowed", ip: lease.IP{Addr: r0, Named: true, Lock: lock("a", ""), Bound: true, Planned: "b", Only: only("c")}, action: lease.Handoff, target: "c"},
		{name: "held, not allowed, allowed node dead", ip: lease.IP{Addr: r0, Named: true, Lock: lock("a", ""), Bound: true, Only: only("x")}, action: lease.Release},
		{name: "held, no node allowed", ip: lease.IP{Addr: r0, Named: true, Lock: lock("a", ""), Bound: true, Only: only()}, action: lease.Release},
		{name: "held, not allowed, not writable, bound: kept", view: notWritable, ip: lease.IP{Addr: r0, Named: true, Lock: lock("a", ""), Bound: true, Only: only("b")}, action: lease.None},
		{name: "held, not allowed, not writable, unbound: not bound", view: notWritable, ip: lease.IP{Addr: r0, Named: true, Lock: lock("a", ""), Only: only("b")}, action: lease.None},
		{name: "held, move to a node not allowed", ip: lease.IP{Addr: r0, Named: true, Lock: lock("a", "b"), Bound: true, Only: only("a", "c")}, action: lease.ClearMove},
		{name: "held, move to an allowed node", ip: lease.IP{Addr: r0, Named: true, Lock: lock("a", "c"), Bound: true, Only: only("a", "c")}, action: lease.Handoff, target: "c"},
		{name: "held, policy wants a node not allowed", ip: lease.IP{Addr: r0, Named: true, Lock: lock("a", ""), Bound: true, Planned: "b", Only: only("a")}, action: lease.None},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.check(t) })
	}
}

func TestOnly(t *testing.T) {
	assert.Assert(t, lease.Only{}.Allows("a"))
	assert.DeepEqual(t, lease.Only{}.Of([]string{"a", "b"}), []string{"a", "b"})
	o := lease.Only{Restricted: true, Nodes: []string{"b", "d"}}
	assert.Assert(t, o.Allows("b") && !o.Allows("a") && !o.Allows(""))
	assert.DeepEqual(t, o.Of([]string{"a", "b", "c", "d"}), []string{"b", "d"})
}
