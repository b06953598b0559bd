package agent

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/eip-project/eip/internal/lease"
)

// How the loop paces its acquisitions, and locks the watch delivers late.

// A held IP whose bind is refused while this node may not write, for a
// moment that no full pass saw, is decided again a renew interval later;
// it used to wait for the next full pass (the resync's, 10 s).
func TestLoopRefusedBindIsRetried(t *testing.T) {
	w := loneNodeWithIP(t)
	ip := testIP(1)
	w.addService("api", ip)
	w.s.reconcile()
	j := <-w.s.writes.jobs
	assert.Equal(t, j.ip, ip)
	w.s.self.renewFailing = true // not writable, and no pass compares it
	w.s.writeDone(w.answer(j))
	w.s.reconcileSome(w.clk.Now())
	assert.DeepEqual(t, w.take(), []string{"create " + leaseName(ip) + " holder=node-a"})
	w.s.self.renewFailing = false
	w.step(w.s.desired.cfg.RenewInterval)
	assert.Assert(t, w.passDue())
	w.s.pass()
	assert.DeepEqual(t, w.take(), []string{"bind " + ip.String()})
}

// An IP whose rank's turn came takes no writer while IPs this node goes
// first for wait for one: it would race the node that ranks first for it.
func TestLoopRankTurnWaitsForOwnShare(t *testing.T) {
	w := newWorld(t, "node-a", defaultTestConfig())
	w.probeWait(0)
	w.setWriters(1)
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
		j := <-w.s.writes.jobs
		assert.Assert(t, mine[j.ip], "%s is node-b's to take first", j.ip)
		w.step(300 * time.Millisecond) // node-b's IPs are node-a's to race for too
		w.s.writeDone(w.answer(j))
		w.s.pass()
	}
	j := <-w.s.writes.jobs
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
	w.probeWait(0)
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
	w.probeWait(0)
	w.setWriters(writers)
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
