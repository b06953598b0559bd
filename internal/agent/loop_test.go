package agent

import (
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/eip-project/eip/internal/alloc"
	"github.com/eip-project/eip/internal/lease"
	"github.com/eip-project/eip/internal/netif"
	"github.com/eip-project/eip/internal/policy"
)

// A lone node takes a new Service's IP: one create naming itself, then the
// bind, and nothing more on the following ticks.
func TestLoopLoneNodeTakesAnIP(t *testing.T) {
	w := loneNodeWithIP(t)
	for range 10 {
		w.tick()
	}
	assert.DeepEqual(t, w.take(), []string(nil))
}

// loneNodeWithIP is node-a alone, once it took a Service's IP: one create
// naming itself, then the bind.
func loneNodeWithIP(t *testing.T) *world {
	w := newWorld(t, "node-a", defaultTestConfig())
	w.addService("web", testIP(0))
	w.pass()
	for range 4 {
		w.tick()
	}
	assert.DeepEqual(t, w.take(), []string{"create eip-198-18-100-1 holder=node-a", "bind 198.18.100.1"})
	return w
}

// A peer that stops renewing loses its IP to the survivor, the successor
// its lock names, exactly once, after its lease duration: the survivor
// binds it, then writes the lock naming itself.
func TestLoopTakeoverFromDeadPeer(t *testing.T) {
	w := newWorld(t, "node-a", defaultTestConfig())
	w.addNode("node-b")
	w.heartbeat("node-b", true)
	w.lock(testIP(0), "node-b")
	w.addService("web", testIP(0))
	w.pass()
	for range 4 {
		w.tick("node-b")
	}
	assert.DeepEqual(t, w.take(), []string(nil))
	for range 3 {
		w.tick() // node-b silent for 1.5 s: still alive
	}
	assert.DeepEqual(t, w.take(), []string(nil))
	for range 4 {
		w.tick()
	}
	assert.DeepEqual(t, w.take(), []string{"bind 198.18.100.1", "update eip-198-18-100-1 holder=node-a"})
}

// A node that may hold no IP renews its heartbeat every ten renew
// intervals with a ten times longer duration, and at once, at the usual
// pace, when it becomes eligible.
func TestLoopIneligibleNodeRenewsSlowly(t *testing.T) {
	w := newWorld(t, "node-a", defaultTestConfig())
	n := w.nodeObj("node-a")
	n.Labels = map[string]string{policy.ExcludeLabel: ""}
	w.must(w.nodes.Update(n))
	w.s.dirtyNodes = true
	w.pass()
	for range 24 {
		w.tick()
	}
	assert.DeepEqual(t, w.renewals, []string{
		"500ms create eligible=false duration=20s",
		"5.5s update eligible=false duration=20s",
		"10.5s update eligible=false duration=20s",
	})
	w.renewals = nil
	n = w.nodeObj("node-a")
	n.Labels = nil
	w.must(w.nodes.Update(n))
	w.s.dirtyNodes = true
	w.pass()
	for range 3 {
		w.tick()
	}
	assert.DeepEqual(t, w.renewals, []string{
		"12.5s update eligible=true duration=2s",
		"13s update eligible=true duration=2s",
		"13.5s update eligible=true duration=2s",
	})
}

// With probing on, a new IP is probed twice before it is bound. An answer
// from another MAC stops the bind; the node keeps the lock and probes
// again a second later, and binds once the probes go unanswered.
func TestLoopProbesBeforeBindingAndBacksOffOnConflict(t *testing.T) {
	w := newWorld(t, "node-a", defaultTestConfig())
	w.a.opt.ProbeWait = 60 * time.Millisecond
	ip := testIP(0)
	w.addService("web", ip)
	w.pass()
	for i := 0; i < 4 && len(w.calls) == 0; i++ {
		w.tick() // until this node knows its peers and acquires
	}
	// The probe goes out with the write, and binding waits for it.
	assert.DeepEqual(t, w.take(), []string{"probe 198.18.100.1", "create eip-198-18-100-1 holder=node-a"})
	w.step(30 * time.Millisecond)
	w.pass()
	assert.DeepEqual(t, w.take(), []string{"probe 198.18.100.1"})
	w.s.claim(netif.Claim{Iface: testIface, IP: ip, MAC: net.HardwareAddr{2, 0, 0, 0, 0, 9}})
	w.pass() // as the loop does after every claim
	w.tick() // 0.5 s after the conflict: not bound, not probed
	assert.DeepEqual(t, w.take(), []string(nil))
	assert.Equal(t, w.s.conflicts.inUse[ip].mac, "02:00:00:00:00:09")
	w.tick() // 1 s after it: probed again, and bound once unanswered
	w.step(30 * time.Millisecond)
	w.pass()
	w.step(30 * time.Millisecond)
	w.pass()
	assert.DeepEqual(t, w.take(), []string{"probe 198.18.100.1", "probe 198.18.100.1", "bind 198.18.100.1"})
	assert.Equal(t, len(w.s.conflicts.inUse), 0)
}

// A loop that runs late renews nothing meanwhile, so its peers may judge
// it dead and take its IPs over while its cache still shows them as its
// own. When the address is then removed (by hand, or by a kernel whose
// lifetime ran out), the late loop must not put it back: that bound IPs on two
// live nodes in the 10,000-IP mass failover. It binds it again only after
// it re-read the locks, and only if the lock still names it.
func TestLoopLateLoopPutsNoAddressBack(t *testing.T) {
	w := newWorld(t, "node-a", defaultTestConfig())
	w.arpIgnored = true // on the interface, with a lifetime
	w.addNode("node-b")
	w.heartbeat("node-b", true)
	taken, kept := testIP(0), testIP(1)
	w.lock(taken, "node-a")
	w.lock(kept, "node-a")
	w.addService("web", taken, kept)
	w.pass()
	for range 4 {
		w.tick("node-b")
	}
	assert.DeepEqual(t, w.take(), []string{"bind 198.18.100.1", "bind 198.18.100.2"})

	// The loop is busy for 3 s: node-b judges node-a dead and takes one IP
	// over; the kernel removes both addresses, and the loop gets to the
	// address events before its tick.
	for range 6 {
		w.step(w.s.cfg.RenewInterval)
		w.heartbeat("node-b", true)
	}
	w.lock(taken, "node-b")
	for _, ip := range []netip.Addr{taken, kept} {
		p := netip.PrefixFrom(ip, 32)
		delete(w.addrs, p)
		w.s.addrEvent(netif.AddrEvent{Iface: testIface, Prefix: p})
	}
	assert.DeepEqual(t, w.take(), []string(nil))
	assert.Equal(t, len(w.s.bound), 0)

	// The late tick binds nothing until the renewal sent at it came back
	// through the watch.
	w.s.tick()
	w.s.reconcile()
	assert.DeepEqual(t, w.take(), []string(nil))
	w.settle()
	w.tick("node-b")
	assert.DeepEqual(t, w.take(), []string{"bind 198.18.100.2"})
}

// takingOver is node-a, probing on, as it takes its IP over from node-b,
// judged dead, as its successor: the probe has just been sent, and the
// lock write waits for the bind (or for an eip node's answer).
func takingOver(t *testing.T) (*world, netip.Addr) {
	ip := testIP(0)
	return takingOverAll(t, ip), ip
}

// takingOverAll is takingOver for each of ips, one Service's.
func takingOverAll(t testing.TB, ips ...netip.Addr) *world {
	w := newWorld(t, "node-a", defaultTestConfig())
	w.a.opt.ProbeWait = 60 * time.Millisecond
	w.addNode("node-b")
	w.heartbeat("node-b", true)
	var probes []string
	for _, ip := range ips {
		w.lock(ip, "node-b")
		probes = append(probes, "probe "+ip.String())
	}
	w.addService("web", ips...)
	w.pass()
	for range 4 {
		w.tick("node-b")
	}
	for i := 0; i < 8 && len(w.calls) == 0; i++ {
		w.tick() // until node-b is judged dead
	}
	assert.DeepEqual(t, w.take(), probes)
	return w
}

// A takeover is probed too. The dead holder's kernel answering (a MAC its
// heartbeat published) is no conflict: the survivor writes the lock at
// once (a holder alive but late lets go once the lock names another),
// probes again 10 ms after each answer and binds once one goes unanswered
// for 20 ms, but not before the first probe wait (60 ms) is over.
func TestLoopTakeoverProbesUntilTheDeadHolderStopsAnswering(t *testing.T) {
	w, ip := takingOver(t)
	w.s.claim(netif.Claim{Iface: testIface, IP: ip, MAC: peerMAC("node-b")})
	assert.Assert(t, w.s.wake.IsZero(), "the recheck wakes a pass over this IP alone")
	assert.Equal(t, w.s.ipWake.at[ip], w.clk.Now().Add(recheckEvery))
	w.pass()
	// An eip node answered: no conflict, no bind, and the write goes.
	assert.DeepEqual(t, w.take(), []string{"update eip-198-18-100-1 holder=node-a"})
	assert.Equal(t, len(w.s.conflicts.inUse), 0)
	w.step(10 * time.Millisecond)
	w.pass()
	assert.DeepEqual(t, w.take(), []string{"probe 198.18.100.1"})
	w.s.claim(netif.Claim{Iface: testIface, IP: ip, MAC: peerMAC("node-b")})
	w.pass()
	w.step(10 * time.Millisecond)
	w.pass()
	assert.DeepEqual(t, w.take(), []string{"probe 198.18.100.1"})
	w.step(20 * time.Millisecond) // unanswered, but 40 ms since the first probe
	w.pass()
	assert.DeepEqual(t, w.take(), []string(nil))
	w.step(20 * time.Millisecond)
	w.pass()
	assert.DeepEqual(t, w.take(), []string{"bind 198.18.100.1"})
	w.s.claim(netif.Claim{Iface: testIface, IP: ip, MAC: peerMAC("node-b")})
	w.pass()
	assert.Equal(t, len(w.s.conflicts.claimed), 0, "an eip node's announcement is not a stranger's claim")
}

// Another node's frames for an address this node neither probes nor holds
// (its announcements and probes of the IPs it acquires) change nothing
// here: they ask for no pass and leave the IP undecided, while one for an
// address this node holds still does.
func TestLoopOthersClaimsAskForNoPass(t *testing.T) {
	w := newWorld(t, "node-a", defaultTestConfig())
	w.addNode("node-b")
	w.heartbeat("node-b", true)
	mine, theirs := testIP(0), testIP(1)
	w.lock(mine, "node-a")
	w.lock(theirs, "node-b")
	w.addService("mine", mine)
	w.addService("theirs", theirs)
	w.pass()
	for range 4 {
		w.tick("node-b")
	}
	assert.DeepEqual(t, w.take(), []string{"bind 198.18.100.1"})
	for _, probe := range []bool{false, true} {
		assert.Assert(t, !w.s.claim(netif.Claim{Iface: testIface, IP: theirs, MAC: peerMAC("node-b"), Probe: probe}))
		assert.Assert(t, !w.s.claim(netif.Claim{Iface: testIface, IP: theirs, MAC: net.HardwareAddr{2, 0, 0, 0, 0, 9}, Probe: probe}))
	}
	assert.Equal(t, len(w.s.dirty), 0)
	assert.Assert(t, w.s.claim(netif.Claim{Iface: testIface, IP: mine, MAC: net.HardwareAddr{2, 0, 0, 0, 0, 9}}))
	assert.Assert(t, w.s.dirty[mine])
	w.pass()
	assert.DeepEqual(t, w.take(), []string(nil)) // a stranger's claim is reported, not answered
}

// The claim watches hand the loop only the claims for an address this
// node probes or binds: the address is wanted from its first probe, before
// any answer may come, and until the full pass after it was let go.
func TestLoopClaimWatchWantsProbedAndBoundAddresses(t *testing.T) {
	w := newWorld(t, "node-a", defaultTestConfig())
	w.a.opt.ProbeWait = 60 * time.Millisecond
	w.addNode("node-b")
	w.heartbeat("node-b", true)
	mine, theirs := testIP(0), testIP(1)
	w.lock(theirs, "node-b")
	w.addService("mine", mine)
	w.addService("theirs", theirs)
	w.pass()
	for i := 0; i < 4 && len(w.calls) == 0; i++ {
		w.tick("node-b")
	}
	assert.DeepEqual(t, w.take(), []string{"probe 198.18.100.1", "create eip-198-18-100-1 holder=node-a successor=node-b"})
	assert.Assert(t, w.s.claimed.has(mine), "probed")
	assert.Assert(t, !w.s.claimed.has(theirs))
	w.step(30 * time.Millisecond)
	w.pass()
	w.step(30 * time.Millisecond)
	w.pass()
	assert.DeepEqual(t, w.take(), []string{"probe 198.18.100.1", "bind 198.18.100.1"})
	assert.Assert(t, w.s.claimed.has(mine), "bound")
	w.deleteService("mine")
	w.s.dirtySvc = true
	w.pass()
	assert.Assert(t, slices.Contains(w.take(), "unbind 198.18.100.1"))
	w.s.dirtySvc = true
	w.pass()
	assert.Assert(t, !w.s.claimed.has(mine), "let go")
}

// An eip node that keeps answering (its loop ran late, or it is cut off
// from the API server and holds) keeps the survivor from binding for as
// long as it answers, probed less and less often; the survivor binds once
// it stops.
func TestLoopTakeoverNeverBindsWhileAnEipNodeAnswers(t *testing.T) {
	w, ip := takingOver(t)
	probes := 0
	for range 60 {
		w.s.claim(netif.Claim{Iface: testIface, IP: ip, MAC: peerMAC("node-b")})
		w.pass()
		w.tick()
		calls := w.take()
		assert.Assert(t, !slices.Contains(calls, "bind 198.18.100.1"), "bound while node-b answers, after %s", w.clk.Now().Sub(t0))
		probes += len(calls)
	}
	assert.Assert(t, probes < 60, "%d probes in 60 renew intervals", probes)
	for range 8 {
		w.tick()
	}
	assert.Assert(t, slices.Contains(w.take(), "bind 198.18.100.1"), "not bound once node-b stopped answering")
}

// A stranger answering the probe of a takeover is a conflict like any
// other, reported in the heartbeat with its MAC; a stranger claiming a
// bound IP is reported there too.
func TestLoopConflictsAndClaimsAreInTheHeartbeat(t *testing.T) {
	w := newWorld(t, "node-a", defaultTestConfig())
	w.a.opt.ProbeWait = 60 * time.Millisecond
	a, b := testIP(0), testIP(1)
	w.addService("web", a, b)
	w.pass()
	for i := 0; i < 4 && len(w.calls) == 0; i++ {
		w.tick()
	}
	stranger := net.HardwareAddr{2, 0xee, 0, 0, 0, 1}
	w.s.claim(netif.Claim{Iface: testIface, IP: a, MAC: stranger})
	for range 3 {
		w.step(30 * time.Millisecond)
		w.pass()
	}
	assert.Assert(t, w.addrs[netip.PrefixFrom(b, 32)] != "", "the other IP is bound")
	w.s.claim(netif.Claim{Iface: testIface, IP: b, MAC: stranger})
	w.tick()
	hb := w.get(lease.HeartbeatName("node-a"))
	assert.Equal(t, hb.Annotations[lease.AnnotationConflicts], "198.18.100.1=02:ee:00:00:00:01")
	assert.Equal(t, hb.Annotations[lease.AnnotationClaims], "198.18.100.2=02:ee:00:00:00:01")
	assert.Equal(t, hb.Annotations[lease.AnnotationMACs], "02:00:00:00:00:01")
	w.step(claimMemory)
	w.tick()
	_, ok := w.get(lease.HeartbeatName("node-a")).Annotations[lease.AnnotationClaims]
	assert.Assert(t, !ok, "a claim not seen again for a minute is forgotten")
}

// A move of an IP the holder does not bind (a stranger answers for it) is
// no hand-off, which the target would bind unprobed: the holder releases
// the lock naming the target as a move, and the target acquires and
// probes it.
func TestLoopMoveOfAnIPInConflictReleasesIt(t *testing.T) {
	w := newWorld(t, "node-a", defaultTestConfig())
	w.a.opt.ProbeWait = 60 * time.Millisecond
	ip := testIP(0)
	w.addNode("node-b")
	w.heartbeat("node-b", true)
	w.addService("web", ip)
	w.pass()
	for i := 0; i < 4 && len(w.calls) == 0; i++ {
		w.tick("node-b")
	}
	assert.DeepEqual(t, w.take(), []string{"probe 198.18.100.1", "create eip-198-18-100-1 holder=node-a successor=node-b"})
	w.s.claim(netif.Claim{Iface: testIface, IP: ip, MAC: net.HardwareAddr{2, 0xee, 0, 0, 0, 1}})
	w.pass()
	w.step(30 * time.Millisecond)
	w.pass()
	assert.Equal(t, w.s.conflicts.inUse[ip].mac, "02:ee:00:00:00:01")
	w.take()

	l := lease.WithMoveTo(w.get(leaseName(ip)), "node-b")
	l.ResourceVersion = w.nextRV()
	w.must(w.leases.Update(l))
	w.tick("node-b")
	assert.DeepEqual(t, w.take(), []string{"update eip-198-18-100-1 holder="})
	assert.Equal(t, w.get(leaseName(ip)).Annotations[lease.AnnotationMoveTo], "node-b")
}

// The kubernetes Service's endpoints are the API server's addresses: a
// Service naming one is rejected, and a ConfigMap whose range comes to
// contain one is refused, the last good configuration staying in force.
func TestLoopAPIServerEndpointsAreNeverBound(t *testing.T) {
	w := newWorld(t, "node-a", map[string]string{"ranges": "198.18.100.0/24", "iface": testIface})
	w.addService("web", testIP(0))
	w.pass()
	for i := 0; i < 4 && len(w.calls) == 0; i++ {
		w.tick()
	}
	assert.DeepEqual(t, w.take(), []string{"create eip-198-18-100-1 holder=node-a", "bind 198.18.100.1"})

	api := testIP(7)
	w.must(w.eps.Add(&discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: "kubernetes", Labels: map[string]string{discoveryv1.LabelServiceName: "kubernetes"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{api.String()}}},
	}))
	w.s.dirtyNodes = true
	w.addService("api", api)
	for range 4 {
		w.tick()
	}
	assert.DeepEqual(t, w.take(), []string(nil))
	assert.Assert(t, strings.Contains(w.s.cfgErr, "contains 198.18.100.8, an address of the API server"), w.s.cfgErr)
	assert.Equal(t, len(w.s.cfg.Ranges), 1, "the last good configuration stays in force")
	assert.Assert(t, w.s.rejected["default/api 198.18.100.8 an address of the API server"], "%v", w.s.rejected)
}

// A loop a second late at the defaults (a slow pass on a loaded machine)
// has not stalled: its peers, who wait two seconds, see the renewal this
// tick sends in time, so it keeps binding. Treating it as
// stalled made a loaded 5,000-IP cluster stall every second, and bind
// nothing.
func TestLoopASecondLateHasNotStalled(t *testing.T) {
	w := loneNodeWithIP(t)
	w.step(500 * time.Millisecond)
	w.tick() // a second after the last tick
	assert.Assert(t, !w.s.stalled)
	assert.Assert(t, !w.s.loopLate(w.clk.Now()))
	w.addService("api", testIP(1))
	w.pass()
	assert.DeepEqual(t, w.take(), []string{"create eip-198-18-100-2 holder=node-a", "bind 198.18.100.2"})
}

// A peer's renewal that changes only how many IPs it holds asks for no
// pass: passes never read it, and in a cold start every renewal of every
// node changes it.
func TestLoopRenewalChangingHeldAsksNoPass(t *testing.T) {
	w := peerRenewedWith(t, 1234, 1)
	assert.Assert(t, !w.s.heartbeatsRenewed())
}

// Nor does a renewal that changes only a node's duration: a survivor of a
// mass failover that leaves slow heartbeats (with one LAN peer left)
// renews at once with a lease duration instead of ten, and both its own
// renewal and its peer's made every survivor pass over every IP as the
// takeovers began. The verdicts it gives stay what the pass reads.
func TestLoopRenewalChangingDurationAsksNoPass(t *testing.T) {
	w := peerRenewedWith(t, 0, 10)
	assert.Assert(t, !w.s.heartbeatsRenewed())
	w.step(3 * w.s.cfg.LeaseDuration)
	assert.Assert(t, w.s.live.Alive("node-b", w.clk.Now()), "node-b's duration is ten lease durations")
}

// peerRenewedWith is node-a's loop, settled with node-b, once node-b's
// heartbeat says it holds held IPs, for factor lease durations.
func peerRenewedWith(t *testing.T, held, factor int) *world {
	w := newWorld(t, "node-a", defaultTestConfig())
	w.addNode("node-b")
	w.heartbeat("node-b", true)
	w.pass()
	for range 4 {
		w.tick("node-b")
	}
	l := w.get(lease.HeartbeatName("node-b"))
	st := lease.HeartbeatStatus{Eligible: true, Held: held, MACs: lease.FormatMACs([]net.HardwareAddr{peerMAC("node-b")})}
	l = lease.RenewedHeartbeat(l, testNS, "node-b", time.Duration(factor)*w.s.cfg.LeaseDuration, st, w.clk.Now())
	l.ResourceVersion = w.nextRV()
	w.must(w.leases.Update(l))
	return w
}

// A reservation left by a node that died before writing the Service's
// status, for a Service this node does not know yet, is kept a lease
// duration from its first sighting, also when an incremental pass is the
// first to see it, and deleted after.
func TestLoopReservationKeptFromItsFirstSighting(t *testing.T) {
	w := loneNodeWithIP(t)
	ip := testIP(5)
	l := lease.NewLockLease(testNS, ip, "node-gone", "", []string{"default/late"}, w.clk.Now())
	l.Annotations[alloc.AnnotationReservedFor] = "default/late"
	l.ResourceVersion = w.nextRV()
	w.must(w.leases.Update(l))
	w.leaseChanged(l)
	w.s.pass()
	w.settle()
	for range 3 {
		w.tick() // 1.5 s of the 2 s lease duration
	}
	assert.DeepEqual(t, w.take(), []string(nil))
	for range 2 {
		w.tick()
	}
	assert.DeepEqual(t, w.take(), []string{"delete " + leaseName(ip) + " holder=node-gone"})
}

// In a mass failover the survivors' renewals queue behind thousands of
// lock changes on the same watch. A lock change proves the watch delivers
// as well as a heartbeat does: the dead holder stays dead and the next
// takeover goes ahead, though no heartbeat changed for longer than the
// tail.
func TestLoopLockChangesKeepTheDeadDead(t *testing.T) {
	w := newWorld(t, "node-a", defaultTestConfig())
	w.a.opt.ProbeWait = 0
	for _, n := range []string{"node-b", "node-c"} {
		w.addNode(n)
		w.heartbeat(n, true)
	}
	// An IP node-c takes first (node-a waits a rank step), and an IP of
	// node-c's whose lock changes later.
	var ip netip.Addr
	for n := 0; !ip.IsValid(); n++ {
		if lease.Rank(testIP(n), "node-a", []string{"node-a", "node-c"}) == 1 {
			ip = testIP(n)
		}
	}
	other := testIP(1000)
	w.lockNaming(ip, "node-b", "") // none: the race decides
	w.lock(other, "node-c")
	w.addService("web", ip, other)
	w.pass()
	for range 4 {
		w.tick("node-b", "node-c")
	}
	for i := 0; i < 8 && w.s.live.Alive("node-b", w.clk.Now()); i++ {
		w.tick("node-c")
	}
	assert.Assert(t, !w.s.live.Alive("node-b", w.clk.Now()))
	assert.DeepEqual(t, w.take(), []string(nil)) // node-c's turn first
	// No heartbeat for 600 ms, longer than the tail; a lock changes.
	w.step(600 * time.Millisecond)
	w.lock(other, "node-c")
	w.s.pass()
	w.settle()
	assert.Assert(t, !w.s.live.Alive("node-b", w.clk.Now()))
	assert.DeepEqual(t, w.take(), []string{"update " + leaseName(ip) + " holder=node-a successor=node-c", "bind " + ip.String()})
}

// While its writers are busy, a survivor first takes the dead holder's IPs
// it ranks first for, and only then races for those another survivor
// ranks first for: in a mass failover each takes its own share without
// Lease conflicts.
func TestLoopTakeoverOwnShareFirst(t *testing.T) {
	w := newWorld(t, "node-a", defaultTestConfig())
	w.a.opt.ProbeWait, w.a.opt.Writers = 0, 1
	for _, n := range []string{"node-b", "node-c"} {
		w.addNode(n)
		w.heartbeat(n, true)
	}
	var mine, theirs []netip.Addr
	for n := 0; len(mine) < 4 || len(theirs) < 4; n++ {
		ip := testIP(n)
		if lease.Rank(ip, "node-a", []string{"node-a", "node-c"}) == 0 {
			mine = append(mine, ip)
		} else {
			theirs = append(theirs, ip)
		}
	}
	mine, theirs = mine[:4], theirs[:4]
	// Listed in the Service with node-c's first, so that the order of the
	// Service is not what puts node-a's first.
	ips := append(slices.Clone(theirs), mine...)
	for _, ip := range ips {
		w.lockNaming(ip, "node-b", "") // none: the race decides
	}
	w.addService("web", ips...)
	// node-a is cordoned until node-b has been dead for longer than the
	// rank step: then every IP of node-b is node-a's to race for at once.
	n := w.nodeObj("node-a").DeepCopy()
	n.Spec.Unschedulable = true
	w.must(w.nodes.Update(n))
	w.s.dirtyNodes = true
	w.pass()
	for range 4 {
		w.tick("node-b", "node-c")
	}
	for range 6 {
		w.tick("node-c")
	}
	assert.Assert(t, !w.s.live.Alive("node-b", w.clk.Now()))
	assert.DeepEqual(t, w.take(), []string(nil))
	n = n.DeepCopy()
	n.Spec.Unschedulable = false
	w.must(w.nodes.Update(n))
	w.s.dirtyNodes = true
	w.tick("node-c")
	w.tick("node-c")
	var order []string
	for _, c := range w.take() {
		if strings.HasPrefix(c, "update ") {
			order = append(order, c)
		}
	}
	want := []string{}
	for _, ip := range append(slices.Clone(mine), theirs...) {
		want = append(want, "update "+leaseName(ip)+" holder=node-a successor=node-c")
	}
	assert.Equal(t, len(order), 8, "%v", order)
	first := slices.Sorted(slices.Values(order[:4]))
	assert.DeepEqual(t, first, slices.Sorted(slices.Values(want[:4])))
}

// A holder cut off from the API server gives an IP up when an eip node
// probes for it (that node took the lock over, and binds once nobody
// answers), but not for a stranger's probe, which its kernel answers, and
// not before a peer can have judged it dead: until its last renewal the
// API server took is a lease duration old, the probe is another node's
// whose cache has not shown the lock yet, and whose create is refused.
func TestLoopHolderWithoutAPIUnbindsOnAPeersProbe(t *testing.T) {
	w := newWorld(t, "node-a", defaultTestConfig())
	w.addNode("node-b")
	w.heartbeat("node-b", true)
	ip := testIP(0)
	w.lock(ip, "node-a")
	w.addService("web", ip)
	w.pass()
	for range 4 {
		w.tick("node-b")
	}
	assert.DeepEqual(t, w.take(), []string{"bind 198.18.100.1"})
	w.s.renewFailing = true
	w.s.claim(netif.Claim{Iface: testIface, IP: ip, MAC: net.HardwareAddr{2, 0, 0, 0, 0, 9}, Probe: true})
	assert.DeepEqual(t, w.take(), []string(nil))
	w.s.claim(netif.Claim{Iface: testIface, IP: ip, MAC: peerMAC("node-b"), Probe: true})
	assert.DeepEqual(t, w.take(), []string(nil)) // a renew interval after the last renewal
	w.step(w.s.lastRenewOK.Add(w.s.lastRenewFor).Sub(w.clk.Now()) - time.Millisecond)
	w.s.claim(netif.Claim{Iface: testIface, IP: ip, MAC: peerMAC("node-b"), Probe: true})
	assert.DeepEqual(t, w.take(), []string(nil)) // just before a peer can have judged node-a dead
	w.step(time.Millisecond)
	w.s.claim(netif.Claim{Iface: testIface, IP: ip, MAC: peerMAC("node-b"), Probe: true})
	assert.DeepEqual(t, w.take(), []string{"unbind 198.18.100.1"})
}

// A held IP whose bind is refused while this node may not write, for a
// moment that no full pass saw, is decided again a renew interval later;
// it used to wait for the next full pass (the resync's, 10 s).
func TestLoopRefusedBindIsRetried(t *testing.T) {
	w := loneNodeWithIP(t)
	ip := testIP(1)
	w.addService("api", ip)
	w.s.reconcile()
	j := <-w.s.jobs
	assert.Equal(t, j.ip, ip)
	w.s.renewFailing = true // not writable, and no pass compares it
	w.s.writeDone(w.answer(j))
	w.s.reconcileSome(w.clk.Now())
	assert.DeepEqual(t, w.take(), []string{"create " + leaseName(ip) + " holder=node-a"})
	w.s.renewFailing = false
	w.step(w.s.cfg.RenewInterval)
	assert.Assert(t, w.s.passDue(w.clk.Now()))
	w.s.pass()
	assert.DeepEqual(t, w.take(), []string{"bind " + ip.String()})
}

// An IP whose rank's turn came takes no writer while IPs this node goes
// first for wait for one: it would race the node that ranks first for it.
func TestLoopRankTurnWaitsForOwnShare(t *testing.T) {
	w := newWorld(t, "node-a", defaultTestConfig())
	w.a.opt.ProbeWait, w.a.opt.Writers = 0, 1
	w.addNode("node-b")
	w.heartbeat("node-b", true)
	w.pass()
	for range 4 {
		w.tick("node-b")
	}
	mine, theirs := map[netip.Addr]bool{}, map[netip.Addr]bool{}
	var ips []netip.Addr
	for n := 0; len(mine) < 3 || len(theirs) < 3; n++ {
		ip := testIP(n)
		if lease.Rank(ip, "node-a", []string{"node-a", "node-b"}) == 0 {
			if len(mine) < 3 {
				mine[ip] = true
				ips = append(ips, ip)
			}
		} else if len(theirs) < 3 {
			theirs[ip] = true
			ips = append(ips, ip)
		}
	}
	w.addService("web", ips...)
	w.s.reconcile()
	for range 3 {
		j := <-w.s.jobs
		assert.Assert(t, mine[j.ip], "%s is node-b's to take first", j.ip)
		w.step(300 * time.Millisecond) // node-b's IPs are node-a's to race for too
		w.s.writeDone(w.answer(j))
		w.s.pass()
	}
	j := <-w.s.jobs
	assert.Assert(t, theirs[j.ip], "then node-b's")
}

// Acquisitions that the API server does not answer in time halve how many
// are in flight, once for those sent before the last halving, down to a
// quarter: below one, one at a time, and after one that timed out a pause
// of a write's timeout (1/window - 1) times, 4 s at a half and 12 s at a
// quarter. Each answered one doubles the window below one and widens it by
// one above, up to the writers. A node keeps as many in flight as the API
// server answers, rather than sending each again as it times out. (Until
// the pause, four timeouts took the window from four to one at once, and
// the sequence was [4, 1, 2, 4, 4, 1]: one each in flight at all times,
// fifty nodes sent more than their API server answered in time; halved
// for each, 32 writes that a stalled API server let time out together
// would take the window to a quarter at once.)
func TestLoopAcquisitionsBackOffWhileTheAPIServerIsSlow(t *testing.T) {
	w, ips := nodeWithWriters(t, 4, 12)
	w.lockTimeouts = 8
	w.addService("web", ips...)
	w.pass()
	for n := 0; len(w.inFlight) == 0 && n < 10; n++ {
		w.tick()
	}
	// 4 -> 2 once for four, 2 -> 1 once for two, 1 -> 0.5: a pause of 4 s.
	assert.DeepEqual(t, w.inFlight, []int{4, 2, 1})
	paused := w.clk.Now()
	for n := 0; len(w.inFlight) == 3 && n < 40; n++ {
		w.tick()
	}
	assert.Equal(t, w.clk.Now().Sub(paused), 4*time.Second)
	assert.DeepEqual(t, w.inFlight, []int{4, 2, 1, 1}) // 0.5 -> 0.25: a pause of 12 s
	paused = w.clk.Now()
	for n := 0; len(w.inFlight) == 4 && n < 40; n++ {
		w.tick()
	}
	assert.Equal(t, w.clk.Now().Sub(paused), 12*time.Second)
	assert.DeepEqual(t, w.inFlight, []int{4, 2, 1, 1, 1, 1, 1, 2, 4, 3})
	var created, timedOut int
	for _, c := range w.take() {
		switch {
		case strings.HasSuffix(c, "timed out"):
			timedOut++
		case strings.HasPrefix(c, "create "):
			created++
		}
	}
	assert.Equal(t, timedOut, 8)
	assert.Equal(t, created, 12)
}

// A node's own lock that the watch delivers late stays held: the node that
// created it keeps the IP bound, and neither creates the lock again nor
// unbinds the IP while the cache has not caught up with its create. On
// fifty nodes' loaded API server, the watch delivered locks 3.7 and 9.3 s
// after their creates were answered; the loop took a lock its cache lacked
// a lease duration after the create for none, and its holder unbound the
// IP ("bound without a lock") or created the lock again.
func TestLoopOwnLockDeliveredLateStaysBound(t *testing.T) {
	w, ip := lateLockOfRankTwo(t)
	for n := range 8 { // 4 s, twice the lease duration
		w.tick("node-b")
		calls := w.take()
		assert.Assert(t, len(calls) == 0, "tick %d before the watch delivers the lock: %q", n+1, calls)
	}
	w.deliverLocks()
	for range 4 {
		w.tick("node-b")
	}
	assert.DeepEqual(t, w.take(), []string(nil))
	assert.Equal(t, w.addrs[netip.PrefixFrom(ip, 32)], testDev)
}

// The same when the watch delivers the lock while a pass reads the Leases
// it listed before: the lock is not among them, but the pass must not take
// it for one deleted since (fifty nodes: 4 IPs unbound within 0.1 s, each
// 2 s after its create, and bound again 0.3 s later).
func TestLoopOwnLockDeliveredDuringAPassStaysBound(t *testing.T) {
	w, ip := lateLockOfRankTwo(t)
	w.afterListing = func() {
		w.afterListing = nil
		w.deliverLocks()
	}
	w.tick("node-b")
	assert.DeepEqual(t, w.take(), []string(nil))
	assert.Equal(t, w.addrs[netip.PrefixFrom(ip, 32)], testDev)
}

// A lock of this node's that was deleted before the watch delivered its
// create is gone once the watch delivered the deletion: the node unbinds
// its IP and races for it again, as for any IP without a lock.
func TestLoopOwnLockDeletedBeforeTheWatchDeliveredIt(t *testing.T) {
	w, ip := lateLockOfRankTwo(t)
	l := w.lagged[0]
	w.lagged = nil
	w.must(w.leases.Add(l))
	w.leaseChanged(l)
	w.must(w.leases.Delete(l))
	gone := l.DeepCopy()
	gone.ResourceVersion = w.nextRV() // a deletion's event carries its own version
	w.leaseChanged(gone)
	w.lockLag = false
	w.tick("node-b")
	assert.DeepEqual(t, w.take(), []string{"unbind " + ip.String()})
	w.tick("node-b")
	assert.DeepEqual(t, w.take(), []string{"create " + leaseName(ip) + " holder=node-a successor=node-b", "bind " + ip.String()})
}

// lateLockOfRankTwo is node-a with node-b, once node-a created and bound
// an IP for which it ranks second (node-b does not act), the watch holding
// the create back.
func lateLockOfRankTwo(t *testing.T) (*world, netip.Addr) {
	w := newWorld(t, "node-a", defaultTestConfig())
	w.a.opt.ProbeWait = 0
	w.addNode("node-b")
	w.heartbeat("node-b", true)
	w.pass()
	for range 4 {
		w.tick("node-b")
	}
	ip := testIP(0)
	for n := 1; lease.Rank(ip, "node-a", []string{"node-a", "node-b"}) == 0; n++ {
		ip = testIP(n) // node-b goes first and does not act: node-a takes it at its rank's turn
	}
	w.lockLag = true
	w.addService("web", ip)
	w.pass()
	w.tick("node-b")
	name := leaseName(ip)
	assert.DeepEqual(t, w.take(), []string{"create " + name + " holder=node-a successor=node-b", "bind " + ip.String()})
	return w, ip
}

// A node starts with slowStart acquisitions in flight, widens the window by
// one for each answered, and narrows it to slowStart again after a lock
// write's timeout without one in flight: fifty nodes given 1,000 IPs at
// once sent 32 creates each, and their API server refused most unread.
func TestLoopAcquisitionsStartSlowAfterAQuietSpell(t *testing.T) {
	w, ips := nodeWithWriters(t, 16, 60)
	w.pass()
	for range 4 {
		w.tick()
	}
	w.addService("web", ips[:30]...)
	w.pass()
	assert.DeepEqual(t, w.inFlight, []int{4, 8, 16, 2})
	for range 3 {
		w.tick() // 1.5 s
	}
	w.addService("db", ips[30:35]...)
	w.pass()
	assert.DeepEqual(t, w.inFlight, []int{4, 8, 16, 2, 5}) // within a write's timeout of the last, as wide
	for range 8 {
		w.tick() // 4 s
	}
	w.addService("api", ips[35:]...)
	w.pass()
	assert.DeepEqual(t, w.inFlight, []int{4, 8, 16, 2, 5, 4, 8, 13})
}

// nodeWithWriters is node-a alone with that many writers, and n IPs for
// its Services.
func nodeWithWriters(t *testing.T, writers, n int) (*world, []netip.Addr) {
	w := newWorld(t, "node-a", defaultTestConfig())
	w.a.opt.ProbeWait, w.a.opt.Writers = 0, writers
	ips := make([]netip.Addr, n)
	for i := range ips {
		ips[i] = testIP(i)
	}
	return w, ips
}

// A node whose window of acquisitions fell below one is at slowStart again
// after a quiet spell, as one above it is: what its API server answered
// before says as little. Fifty nodes' cold start let lock writes time out,
// and a node left at a quarter sent a dead peer's IPs one at a time
// minutes later, each after the answer to the one before.
func TestLoopAcquisitionsStartSlowAfterAQuietSpellBelowOne(t *testing.T) {
	w, ips := nodeWithWriters(t, 16, 8)
	w.pass()
	for range 4 {
		w.tick()
	}
	w.lockTimeouts = len(ips)
	w.addService("web", ips...)
	w.pass()
	for n := 0; len(w.inFlight) < 4 && n < 20; n++ {
		w.tick()
	}
	assert.DeepEqual(t, w.inFlight, []int{4, 2, 1, 1}) // a quarter: a pause of 12 s
	// node-b joins and takes them meanwhile, and holds them for a while.
	w.addNode("node-b")
	w.heartbeat("node-b", true)
	for _, ip := range ips {
		w.lock(ip, "node-b")
	}
	for range 40 {
		w.tick("node-b")
	}
	w.lockTimeouts = 0
	w.take()
	// node-b dies: its IPs are node-a's alone.
	for n := 0; len(w.inFlight) == 4 && n < 20; n++ {
		w.tick()
	}
	assert.DeepEqual(t, w.inFlight, []int{4, 2, 1, 1, 4, 4})
}

// A lock write that the API server answers later than a lease duration is
// still an answer. At fifty nodes it answered a dead node's takeovers in
// up to 2.4 s, and with a 2 s timeout half of them timed out at their
// writer, 23 after the API server had taken them: each halved its node's
// window, down to one at a time with pauses, and the node sent the write
// again on the lock it had read, a certain conflict.
func TestLoopTakeoverAnsweredSlowlyIsAnswered(t *testing.T) {
	w, ips := nodeWithWriters(t, 16, 8)
	w.addNode("node-b")
	w.heartbeat("node-b", true)
	for _, ip := range ips {
		w.lock(ip, "node-b")
	}
	w.addService("web", ips...)
	w.pass()
	for range 4 {
		w.tick("node-b")
	}
	w.lockLatency = 2500 * time.Millisecond
	for range 5 {
		w.tick() // node-b dead from 2 s on
	}
	calls := w.take()
	var updates, binds []string
	for _, c := range calls {
		switch {
		case strings.HasPrefix(c, "update "):
			updates = append(updates, c)
		case strings.HasPrefix(c, "bind "):
			binds = append(binds, c)
		}
	}
	assert.Equal(t, len(binds), len(ips), "%v", calls)
	assert.Equal(t, len(updates), len(ips), "%v", calls)
	for _, u := range updates {
		assert.Assert(t, !strings.HasSuffix(u, "after the timeout"), "%v", calls)
	}
	assert.DeepEqual(t, w.inFlight, []int{4, 4})
}

// node-c restarted: node-b already hears it again and hands it an IP,
// naming node-a the successor, while node-a still judges node-c dead (a
// restarted peer's first datagrams count for nothing until their
// handshake is done). The write vouches for node-c: node-a neither binds
// the IP as its successor nor races for it (it did: the IP answered from
// two nodes, or went back and forth). If node-c stays silent, node-a
// takes the IP a lease duration after the write.
func TestLoopHandOffToANodeJudgedDeadVouchesForIt(t *testing.T) {
	w := newWorld(t, "node-a", defaultTestConfig())
	w.a.opt.ProbeWait = 0
	for _, n := range []string{"node-b", "node-c"} {
		w.addNode(n)
		w.heartbeat(n, true)
	}
	ip := testIP(0)
	w.lockNaming(ip, "node-b", "node-c")
	w.addService("web", ip)
	w.pass()
	for range 4 {
		w.tick("node-b", "node-c")
	}
	for i := 0; i < 8 && w.s.live.Alive("node-c", w.clk.Now()); i++ {
		w.tick("node-b")
	}
	assert.Assert(t, !w.s.live.Alive("node-c", w.clk.Now()))
	assert.DeepEqual(t, w.take(), []string(nil))

	w.lockNaming(ip, "node-c", "node-a")
	w.s.pass() // as the loop answers a lock's change
	w.settle()
	for range 3 {
		w.tick("node-b")
	}
	assert.DeepEqual(t, w.take(), []string(nil))
	for range 2 {
		w.tick("node-b")
	}
	assert.DeepEqual(t, w.take(), []string{"bind 198.18.100.1", "update eip-198-18-100-1 holder=node-a successor=node-b"})
}

// A successor whose probe a stranger answers does not bind, and writes the
// lock at once: it keeps the lock and reports the conflict, as any node
// taking an IP over does, rather than leaving the dead holder named.
func TestLoopSuccessorInConflictWritesTheLock(t *testing.T) {
	w, ip := takingOver(t)
	w.s.claim(netif.Claim{Iface: testIface, IP: ip, MAC: net.HardwareAddr{2, 0xee, 0, 0, 0, 1}})
	w.step(60 * time.Millisecond)
	w.pass()
	assert.DeepEqual(t, w.take(), []string{"update eip-198-18-100-1 holder=node-a"})
	assert.Equal(t, len(w.s.conflicts.inUse), 1)
}

// A successor's write waits while another of its successions is still
// binding, and both go once the last is bound: in a mass failover the API
// server's work for each write took the CPU that the binds of every
// survivor needed, on cores they shared.
func TestLoopSuccessorWritesWaitForItsOtherBinds(t *testing.T) {
	first, second := testIP(0), testIP(1)
	w := takingOverAll(t, first, second)
	// The second IP's probes go 30 ms after the first's, as in a pass
	// that sends thousands.
	p := w.s.conflicts.probing[second]
	p.first, p.started = p.first.Add(30*time.Millisecond), p.started.Add(30*time.Millisecond)
	w.s.conflicts.probing[second] = p
	w.step(30 * time.Millisecond)
	w.pass()
	assert.DeepEqual(t, w.take(), []string{"probe 198.18.100.1"})
	w.step(30 * time.Millisecond)
	w.pass()
	assert.DeepEqual(t, w.take(), []string{"bind 198.18.100.1", "probe 198.18.100.2"})
	w.step(30 * time.Millisecond)
	w.pass()
	assert.DeepEqual(t, w.take(), []string{"bind 198.18.100.2",
		"update eip-198-18-100-2 holder=node-a", "update eip-198-18-100-1 holder=node-a"})
}

// A successor with 100 IPs to bind, each probe and bind taking 10 ms of
// the loop's time as on a loaded machine (3 s of work), binds them in
// slices of a quarter of a renew interval, and the loop ticks and renews
// on time between them. In one long pass it starved itself of its
// renewals and of the watch: it stopped binding as no longer writable or
// on time, and a pass that outlasted the watch's break threshold granted
// the dead holder a fresh lease duration (without liveness over the LAN),
// so that it bound none of the 100 in 5 s.
func TestLoopSuccessorBindsInSlices(t *testing.T) {
	var ips []netip.Addr
	for i := range 100 {
		ips = append(ips, testIP(i))
	}
	w := takingOverAll(t, ips...)
	w.sendTakes = 10 * time.Millisecond
	start, last := w.clk.Now(), w.s.lastTick
	for w.clk.Now().Sub(start) < 5*time.Second && len(w.addrs) < len(ips) {
		if w.clk.Now().Sub(w.s.lastTick) >= w.s.cfg.RenewInterval {
			w.s.tick()
			assert.Assert(t, w.s.lastTick.Sub(last) < w.s.lateAfter(), "a tick %s after the one before", w.s.lastTick.Sub(last))
			last = w.s.lastTick
		}
		w.s.pass()
		w.settle()
		w.step(time.Millisecond)
	}
	assert.Equal(t, len(w.addrs), len(ips), "bound after %s", w.clk.Now().Sub(start))
}

// The holder comes back (its eipd restarted, its link restored) just
// after its successor bound its IP: the lock names the successor by then,
// and the IP stays there. A successor that holds its write much longer
// leaves the lock naming the holder, which then takes the IP back: a
// second outage, and the IP on two nodes for a moment.
func TestLoopSuccessorKeepsAnIPWhoseHolderComesBack(t *testing.T) {
	w, ip := takingOver(t)
	for len(w.addrs) == 0 {
		w.step(10 * time.Millisecond)
		w.pass()
	}
	w.tick()
	w.tick("node-b") // back, renewing
	w.tick("node-b")
	_, bound := w.addrs[netip.PrefixFrom(ip, 32)]
	assert.Assert(t, bound, "the successor unbound %s: %v", ip, w.take())
	l := w.get(leaseName(ip))
	assert.Assert(t, l != nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == "node-a", "lock %v", l)
}
