package agent

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/eip-project/eip/internal/netif"
)

// Succession and hand-offs in the loop.

// node-c restarted: node-b already hears it again and hands it an IP,
// naming node-a the successor, while node-a still judges node-c dead (a
// restarted peer's first datagrams count for nothing until their
// handshake is done). The write vouches for node-c: node-a neither binds
// the IP as its successor nor races for it (it did: the IP answered from
// two nodes, or went back and forth). If node-c stays silent, node-a
// takes the IP a lease duration after the write.
func TestLoopHandOffToANodeJudgedDeadVouchesForIt(t *testing.T) {
	w := newWorld(t, "node-a", defaultTestConfig())
	w.probeWait(0)
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
	w.tickUntilDead("node-c", "node-b")
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
	start, last := w.clk.Now(), w.s.self.lastTick
	for w.clk.Now().Sub(start) < 5*time.Second && len(w.addrs) < len(ips) {
		if w.clk.Now().Sub(w.s.self.lastTick) >= w.s.desired.cfg.RenewInterval {
			w.s.tick()
			assert.Assert(t, w.s.self.lastTick.Sub(last) < w.s.desired.lateAfter(), "a tick %s after the one before", w.s.self.lastTick.Sub(last))
			last = w.s.self.lastTick
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

// The successor a lock names is live (renewing) but never binds nor
// writes: its interface is missing, or it is compromised. Its holder
// dies, and another node binds the IP within two lease durations and a
// probe window of the holder being judged dead, behind the successor. A
// successor waited for without a deadline kept the IP dark for as long as
// it stayed live.
func TestLoopSuccessorThatNeverBindsIsRaced(t *testing.T) {
	w := newWorld(t, "node-a", defaultTestConfig())
	w.probeWait(60 * time.Millisecond)
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
	w.tickUntilDead("node-b", "node-c")
	dead, ok := w.s.live.DeadSince("node-b", w.clk.Now())
	assert.Assert(t, ok)
	bound := func() bool { _, ok := w.addrs[netip.PrefixFrom(ip, 32)]; return ok }
	limit := dead.Add(2*w.s.desired.cfg.LeaseDuration + w.a.opt.ProbeWait)
	for !bound() && w.clk.Now().Before(limit) {
		w.step(10 * time.Millisecond)
		if w.clk.Now().Sub(w.s.self.lastTick) >= w.s.desired.cfg.RenewInterval {
			w.s.tick()
			w.heartbeat("node-c", true)
		}
		w.pass()
	}
	assert.Assert(t, bound(), "not bound %s after node-b was judged dead: %v", w.clk.Now().Sub(dead), w.take())
	l := w.get(leaseName(ip))
	assert.Equal(t, *l.Spec.HolderIdentity, "node-a")
	t.Logf("bound %s after node-b was judged dead (lease %s, probe window %s)", w.clk.Now().Sub(dead), w.s.desired.cfg.LeaseDuration, w.a.opt.ProbeWait)
}
