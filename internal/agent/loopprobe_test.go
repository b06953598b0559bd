package agent

import (
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	"k8s.io/client-go/tools/record"

	"github.com/eip-project/eip/internal/lease"
	"github.com/eip-project/eip/internal/netif"
)

// The loop probes the LAN before it binds, and what answers.

// With probing on, a new IP is probed twice before it is bound. An answer
// from another MAC stops the bind; the node keeps the lock and probes
// again a second later, and binds once the probes go unanswered.
func TestLoopProbesBeforeBindingAndBacksOffOnConflict(t *testing.T) {
	w := newWorld(t, "node-a", defaultTestConfig())
	w.probeWait(60 * time.Millisecond)
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
		w.step(w.s.desired.cfg.RenewInterval)
		w.heartbeat("node-b", true)
	}
	w.lock(taken, "node-b")
	for _, ip := range []netip.Addr{taken, kept} {
		p := netip.PrefixFrom(ip, 32)
		delete(w.addrs, p)
		w.s.addrEvent(netif.AddrEvent{Iface: testIface, Prefix: p})
	}
	assert.DeepEqual(t, w.take(), []string(nil))
	assert.Equal(t, len(w.s.binder.bound), 0)

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

// takingOverAll is takingOver for each of ips, one Service's: as many as
// the test needs, past the default cap of addresses per Service.
func takingOverAll(t testing.TB, ips ...netip.Addr) *world {
	cfg := defaultTestConfig()
	cfg["max-ips-per-service"] = "off"
	w := newWorld(t, "node-a", cfg)
	w.probeWait(60 * time.Millisecond)
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
	assert.Assert(t, w.s.sched.wake.IsZero(), "the recheck wakes a pass over this IP alone")
	assert.Equal(t, w.s.sched.ipWake.at[ip], w.clk.Now().Add(recheckEvery))
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

// Silence is no answer while a claim waits unread: when the recheck's wait
// ends with the dead holder's answer still queued for the loop (its claim
// watch fell behind), the takeover does not bind; once the answer is read
// it probes again, and binds only when a probe truly goes unanswered.
func TestLoopTakeoverWaitsForClaimsUnread(t *testing.T) {
	w, ip := takingOver(t)
	w.s.claim(netif.Claim{Iface: testIface, IP: ip, MAC: peerMAC("node-b")})
	w.pass()
	assert.DeepEqual(t, w.take(), []string{"update eip-198-18-100-1 holder=node-a"})
	w.step(10 * time.Millisecond)
	w.pass()
	assert.DeepEqual(t, w.take(), []string{"probe 198.18.100.1"})
	w.step(60 * time.Millisecond) // the first probe wait and the recheck's are over
	w.s.binder.claims <- netif.Claim{Iface: testIface, IP: ip, MAC: peerMAC("node-b")}
	w.pass()
	assert.DeepEqual(t, w.take(), []string(nil)) // not bound: an answer waits unread
	w.s.claim(<-w.s.binder.claims)
	w.step(recheckEvery)
	w.pass()
	assert.DeepEqual(t, w.take(), []string{"probe 198.18.100.1"})
	w.step(recheckWait)
	w.pass()
	assert.DeepEqual(t, w.take(), []string{"bind 198.18.100.1"})
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
	assert.Equal(t, len(w.s.sched.dirty), 0)
	assert.Assert(t, w.s.claim(netif.Claim{Iface: testIface, IP: mine, MAC: net.HardwareAddr{2, 0, 0, 0, 0, 9}}))
	assert.Assert(t, w.s.sched.dirty[mine])
	w.pass()
	assert.DeepEqual(t, w.take(), []string(nil)) // a stranger's claim is reported, not answered
}

// The claim watches hand the loop only the claims for an address this
// node probes or binds: the address is wanted from its first probe, before
// any answer may come, and until the full pass after it was let go.
func TestLoopClaimWatchWantsProbedAndBoundAddresses(t *testing.T) {
	w := newWorld(t, "node-a", defaultTestConfig())
	w.probeWait(60 * time.Millisecond)
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
	assert.Assert(t, w.s.binder.claimed.has(mine), "probed")
	assert.Assert(t, !w.s.binder.claimed.has(theirs))
	w.step(30 * time.Millisecond)
	w.pass()
	w.step(30 * time.Millisecond)
	w.pass()
	assert.DeepEqual(t, w.take(), []string{"probe 198.18.100.1", "bind 198.18.100.1"})
	assert.Assert(t, w.s.binder.claimed.has(mine), "bound")
	w.deleteService("mine")
	w.s.sched.dirtySvc = true
	w.pass()
	assert.Assert(t, slices.Contains(w.take(), "unbind 198.18.100.1"))
	w.s.sched.dirtySvc = true
	w.pass()
	assert.Assert(t, !w.s.binder.claimed.has(mine), "let go")
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
	w.probeWait(60 * time.Millisecond)
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
	w.probeWait(60 * time.Millisecond)
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

// A dead holder's MAC that goes on answering a takeover's probes for a
// lease duration and deadMACGrace is no dying node: the IP stays unbound,
// and one AddressConflict Warning names the MAC (a LAN host answering with
// it keeps the IP dark, which eip cannot prevent but reports). Answering
// less long, it is only a holder letting go: nothing is reported.
func TestLoopDeadHoldersMACStillAnsweringIsReported(t *testing.T) {
	w, ip := takingOver(t)
	mac := peerMAC("node-b")
	conflicts := func() (n int, msgs []string) {
		ch := w.a.recorder.(*record.FakeRecorder).Events
		for {
			select {
			case e := <-ch:
				if strings.Contains(e, " AddressConflict ") {
					n++
					msgs = append(msgs, e)
				}
			default:
				return n, msgs
			}
		}
	}
	start := w.clk.Now()
	limit := w.s.desired.cfg.LeaseDuration + deadMACGrace
	for w.clk.Now().Sub(start) < limit-recheckMax {
		w.s.claim(netif.Claim{Iface: testIface, IP: ip, MAC: mac})
		w.step(100 * time.Millisecond)
		w.pass()
	}
	n, _ := conflicts()
	assert.Equal(t, n, 0, "reported a holder that was letting go")
	for w.clk.Now().Sub(start) < limit+2*recheckMax {
		w.s.claim(netif.Claim{Iface: testIface, IP: ip, MAC: mac})
		w.step(100 * time.Millisecond)
		w.pass()
	}
	n, msgs := conflicts()
	assert.Equal(t, n, 1, "%v", msgs)
	assert.Assert(t, strings.Contains(msgs[0], mac.String()), msgs[0])
	_, bound := w.addrs[netip.PrefixFrom(ip, 32)]
	assert.Assert(t, !bound, "bound while the dead holder's MAC answers")
}
