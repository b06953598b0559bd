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
	w.s.sched.dirtyNodes = true
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
	w.s.sched.dirtyNodes = true
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
	w.s.sched.dirtyNodes = true
	w.addService("api", api)
	for range 4 {
		w.tick()
	}
	assert.DeepEqual(t, w.take(), []string(nil))
	assert.Assert(t, strings.Contains(w.s.desired.cfgErr, "contains 198.18.100.8, an address of the API server"), w.s.desired.cfgErr)
	assert.Equal(t, len(w.s.desired.cfg.Ranges), 1, "the last good configuration stays in force")
	assert.Assert(t, w.s.desired.rejected["default/api 198.18.100.8 an address of the API server"], "%v", w.s.desired.rejected)
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
	assert.Assert(t, !w.s.self.stalled)
	assert.Assert(t, !w.s.self.loopLate(w.clk.Now(), w.s.desired.lateAfter()))
	w.addService("api", testIP(1))
	w.pass()
	assert.DeepEqual(t, w.take(), []string{"create eip-198-18-100-2 holder=node-a", "bind 198.18.100.2"})
}

// A peer's renewal that changes only how many IPs it holds asks for no
// pass: passes never read it, and in a cold start every renewal of every
// node changes it.
func TestLoopRenewalChangingHeldAsksNoPass(t *testing.T) {
	w := peerRenewedWith(t, 1234, 1)
	assert.Assert(t, !w.heartbeatsRenewed())
}

// Nor does a renewal that changes only a node's duration: a survivor of a
// mass failover that leaves slow heartbeats (with one LAN peer left)
// renews at once with a lease duration instead of ten, and both its own
// renewal and its peer's made every survivor pass over every IP as the
// takeovers began. The verdicts it gives stay what the pass reads.
func TestLoopRenewalChangingDurationAsksNoPass(t *testing.T) {
	w := peerRenewedWith(t, 0, 10)
	assert.Assert(t, !w.heartbeatsRenewed())
	w.step(3 * w.s.desired.cfg.LeaseDuration)
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
	l = lease.RenewedHeartbeat(l, testNS, "node-b", time.Duration(factor)*w.s.desired.cfg.LeaseDuration, st, w.clk.Now())
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
	w.probeWait(0)
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
	w.tickUntilDead("node-b", "node-c")
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
	w.probeWait(0)
	w.setWriters(1)
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
	w.s.sched.dirtyNodes = true
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
	w.s.sched.dirtyNodes = true
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
	w.s.self.renewFailing = true
	w.s.claim(netif.Claim{Iface: testIface, IP: ip, MAC: net.HardwareAddr{2, 0, 0, 0, 0, 9}, Probe: true})
	assert.DeepEqual(t, w.take(), []string(nil))
	w.s.claim(netif.Claim{Iface: testIface, IP: ip, MAC: peerMAC("node-b"), Probe: true})
	assert.DeepEqual(t, w.take(), []string(nil)) // a renew interval after the last renewal
	w.step(w.s.self.lastRenewOK.Add(w.s.self.lastRenewFor).Sub(w.clk.Now()) - time.Millisecond)
	w.s.claim(netif.Claim{Iface: testIface, IP: ip, MAC: peerMAC("node-b"), Probe: true})
	assert.DeepEqual(t, w.take(), []string(nil)) // just before a peer can have judged node-a dead
	w.step(time.Millisecond)
	w.s.claim(netif.Claim{Iface: testIface, IP: ip, MAC: peerMAC("node-b"), Probe: true})
	assert.DeepEqual(t, w.take(), []string{"unbind 198.18.100.1"})
}
