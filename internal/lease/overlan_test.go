package lease_test

import (
	"strconv"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/eip-project/eip/internal/lease"
)

// slowDuration is the duration of a heartbeat renewed slowly because
// liveness goes over the LAN.
const slowDuration = 20 * time.Second

// lanCluster is a cluster whose nodes name a liveness port and renew their
// heartbeats slowly; liveness comes in datagrams.
type lanCluster struct{ *cluster }

func newLANCluster(t *testing.T, nodes ...string) lanCluster {
	c := lanCluster{newCluster(t)}
	c.l.SetLAN(duration, 2*renew, 4*renew, suspect)
	c.l.Sending(at(0))
	for _, n := range append([]string{"self"}, nodes...) {
		c.versions[n]++
		c.l.Observe(lease.Heartbeat{Node: n, Duration: slowDuration, LivenessPort: 9403, Version: strconv.Itoa(c.versions[n])}, at(0))
	}
	return c
}

// hear delivers a datagram from node at d with the given ages.
func (c lanCluster) hear(node string, d time.Duration, ages map[string]time.Duration) bool {
	return c.l.Datagram(node, ages, at(d))
}

// every delivers a datagram from each node every renew interval in [from, to].
func (c lanCluster) every(from, to time.Duration, nodes ...string) {
	for d := from; d <= to; d += renew {
		for _, n := range nodes {
			c.hear(n, d, nil)
		}
	}
}

func TestLANPeerDeadAfterDurationOfSilence(t *testing.T) {
	c := newLANCluster(t, "a", "b")
	c.every(0, time.Second, "a", "b")
	c.every(time.Second+renew, 5*time.Second, "a")

	assert.Assert(t, c.l.Alive("b", at(time.Second+duration-ms)), "heard within the duration")
	assert.Assert(t, !c.l.Alive("b", at(time.Second+duration)), "the slow heartbeat does not keep it alive")
	assert.Assert(t, !c.l.Renewing("b", at(time.Second+duration)))
	since, ok := c.l.DeadSince("b", at(4*time.Second))
	assert.Assert(t, ok)
	assert.Equal(t, since, at(time.Second+duration))
	next, ok := c.l.NextExpiry(at(time.Second + 100*ms))
	assert.Assert(t, ok)
	assert.Equal(t, next, at(time.Second+duration), "the timer wakes the loop when b dies")
}

// A peer that one node cannot hear is alive while another reports it.
func TestLANPeerReportedByAnother(t *testing.T) {
	c := newLANCluster(t, "a", "b")
	c.every(0, time.Second, "b")
	for d := time.Duration(0); d <= 5*time.Second; d += renew {
		c.hear("a", d, map[string]time.Duration{"b": 100 * ms})
	}
	assert.Assert(t, c.l.Alive("b", at(5*time.Second)))
	assert.Assert(t, c.l.Renewing("b", at(5*time.Second)))
}

// Reports do not make a sign older than one already known.
func TestLANReportOlderThanDirectIgnored(t *testing.T) {
	c := newLANCluster(t, "a", "b")
	c.every(0, 3*time.Second, "a", "b")
	c.hear("a", 3*time.Second+100*ms, map[string]time.Duration{"b": 1900 * ms})
	assert.Assert(t, c.l.Alive("b", at(3*time.Second+duration-ms)))
}

// A node that hears nobody cannot tell a dead peer from its own deafness:
// it judges from the heartbeats, whose slow duration keeps everyone alive.
func TestLANQuietFallsBackToHeartbeats(t *testing.T) {
	c := newLANCluster(t, "a", "b")
	c.every(0, time.Second, "a", "b")
	c.selfRenews(0, 10*time.Second)
	assert.Assert(t, !c.l.LANConnected(at(5*time.Second)))
	assert.Assert(t, c.l.Alive("a", at(5*time.Second)))
	assert.Assert(t, c.l.Alive("b", at(5*time.Second)))
}

// After a silence of the LAN longer than the gap, every node gets a fresh
// duration: it is alive but not seen renewing until it is heard.
func TestLANBreakGrantsFreshDuration(t *testing.T) {
	c := newLANCluster(t, "a", "b")
	c.every(0, time.Second, "a", "b")
	c.hear("a", 10*time.Second, nil)
	assert.Assert(t, c.l.Alive("b", at(10*time.Second+duration-ms)))
	assert.Assert(t, !c.l.Renewing("b", at(10*time.Second)))
	assert.Assert(t, c.l.Renewing("a", at(10*time.Second)))
	assert.Assert(t, c.hear("b", 10*time.Second+100*ms, nil), "b heard: a pass sees it renewing")
	assert.Assert(t, !c.hear("b", 10*time.Second+200*ms, nil), "nothing changed")
}

// fence and suspect are fence-after and lease.SuspectAfter at the default
// lease duration and renew interval.
const (
	fence   = 1500 * ms
	suspect = time.Second
)

func TestSuspectAfter(t *testing.T) {
	assert.Equal(t, lease.SuspectAfter(duration, fence, renew), suspect)
	assert.Equal(t, lease.SuspectAfter(time.Second, 750*ms, 250*ms), 500*ms, "the tuned lease")
	assert.Equal(t, lease.SuspectAfter(duration, 1200*ms, renew), 700*ms, "a renew interval before fence-after")
	assert.Equal(t, lease.SuspectAfter(duration, 600*ms, renew), 250*ms, "at least half a renew interval")
}

func TestUnheard(t *testing.T) {
	c := newLANCluster(t, "a", "b")
	// a hears b and us.
	for d := time.Duration(0); d <= time.Second; d += renew {
		c.hear("a", d, map[string]time.Duration{"b": 0, "self": 100 * ms})
	}
	un, _ := c.l.Unheard(at(time.Second), fence)
	assert.Assert(t, !un)
	// From 1s, a hears b but no longer us: our datagrams, our answers
	// included, are lost. a's reports are stale from 2 s; the second,
	// at 2.5 s, says that our answer to the first did not reach it.
	for d := time.Second + renew; d <= 2*time.Second; d += renew {
		c.hear("a", d, map[string]time.Duration{"b": 0, "self": d - 900*ms})
	}
	un, next := c.l.Unheard(at(2*time.Second), fence)
	assert.Assert(t, !un)
	assert.Equal(t, next, time.Time{}, "one stale report may have crossed our answer")
	c.hear("a", 2*time.Second+renew, map[string]time.Duration{"b": 0, "self": 1600 * ms})
	un, _ = c.l.Unheard(at(2*time.Second+renew), fence)
	assert.Assert(t, un, "a last had a sign of us at 0.9 s and judges us dead at 2.9 s: we must unbind now")
}

// The second stale report comes before fence-after: it sets the deadline.
func TestUnheardDeadline(t *testing.T) {
	c := newLANCluster(t, "a", "b")
	c.hear("a", 0, map[string]time.Duration{"b": 0, "self": 0})
	c.hear("a", time.Second, map[string]time.Duration{"b": 0, "self": suspect})
	c.hear("a", time.Second+300*ms, map[string]time.Duration{"b": 0, "self": suspect + 300*ms})
	un, next := c.l.Unheard(at(time.Second+300*ms), fence)
	assert.Assert(t, !un)
	assert.Equal(t, next, at(fence))
	un, _ = c.l.Unheard(at(fence), fence)
	assert.Assert(t, un)
}

// A peer that hears nobody but us judges nobody dead; one we no longer
// hear may be dead: neither makes us unbind.
func TestUnheardIgnoresDeafAndSilentPeers(t *testing.T) {
	c := newLANCluster(t, "a", "b")
	for d := time.Duration(0); d <= 5*time.Second; d += renew {
		c.hear("a", d, nil) // a hears nobody
	}
	c.hear("b", 0, map[string]time.Duration{"a": 0, "self": 0})
	un, _ := c.l.Unheard(at(5*time.Second), fence)
	assert.Assert(t, !un)
}

// A peer that sends to us now and then, and learns of us through others
// meanwhile, reports a sign of us that is younger than suspect: it says
// nothing of what that peer knows later, and sets no deadline. A peer whose
// sign of us grows suspect old asks us at once; our answer reaches it, and
// its answer to ours ends the run of stale reports.
func TestUnheardCountsOnlyConfirmedStaleReports(t *testing.T) {
	c := newLANCluster(t, "a", "b")
	c.every(0, 3*time.Second, "b")
	c.hear("a", time.Second, map[string]time.Duration{"b": 0, "self": 900 * ms})
	un, next := c.l.Unheard(at(time.Second), fence)
	assert.Assert(t, !un)
	assert.Equal(t, next, time.Time{}, "a report 0.9 s old sets no deadline")
	un, _ = c.l.Unheard(at(1600*ms+ms), fence)
	assert.Assert(t, !un, "past the 0.1 s sign + fence-after: a learnt of us since, through b")

	c.hear("a", 2*time.Second, map[string]time.Duration{"b": 0, "self": suspect}) // a asks
	c.hear("a", 2*time.Second+2*ms, map[string]time.Duration{"b": 0, "self": ms}) // our answer reached it
	c.hear("a", 2*time.Second+renew, map[string]time.Duration{"b": 0, "self": suspect})
	un, next = c.l.Unheard(at(2*time.Second+renew), fence)
	assert.Assert(t, !un, "a new run of stale reports")
	assert.Equal(t, next, time.Time{})
}

// A node that joins hears the others before it hears us: its first reports
// name them and not us. They count from when we began hearing it, not
// from our own start, or every node would hand its IPs away whenever
// another joined.
func TestUnheardJoiningPeer(t *testing.T) {
	c := newLANCluster(t, "a", "b")
	for d := time.Duration(0); d <= 3*time.Second; d += renew {
		c.hear("a", d, map[string]time.Duration{"self": 100 * ms})
	}
	c.hear("b", 3*time.Second, map[string]time.Duration{"a": 0})
	un, _ := c.l.Unheard(at(3*time.Second), fence)
	assert.Assert(t, !un, "b has only just started")

	c.hear("b", 3*time.Second+renew, map[string]time.Duration{"a": 0, "self": 100 * ms})
	un, _ = c.l.Unheard(at(5*time.Second), fence)
	assert.Assert(t, !un, "b heard us")

	// b goes on without ever naming us: from its first datagram it had
	// fence-after to hear us.
	c2 := newLANCluster(t, "a", "b")
	for d := 3 * time.Second; d <= 5*time.Second; d += renew {
		c2.hear("b", d, map[string]time.Duration{"a": 0})
	}
	un, _ = c2.l.Unheard(at(3*time.Second+fence-ms), fence)
	assert.Assert(t, !un)
	un, _ = c2.l.Unheard(at(3*time.Second+fence), fence)
	assert.Assert(t, un, "b never heard us in fence-after")
}

// A node opens its port well before it first speaks when its first pass
// is long: until its first datagram leaves it is never unheard, and a peer
// that never heard it counts from that datagram.
func TestUnheardCountsFromFirstDatagramSent(t *testing.T) {
	c := lanCluster{newCluster(t)}
	c.l.SetLAN(duration, 2*renew, 4*renew, suspect)
	for _, n := range []string{"self", "a", "b"} {
		c.versions[n]++
		c.l.Observe(lease.Heartbeat{Node: n, Duration: slowDuration, LivenessPort: 9403, Version: strconv.Itoa(c.versions[n])}, at(0))
	}
	for d := time.Duration(0); d <= 6*time.Second; d += renew {
		c.hear("a", d, map[string]time.Duration{"b": 0})
	}
	un, _ := c.l.Unheard(at(6*time.Second), fence)
	assert.Assert(t, !un, "nothing sent yet: nobody could have heard us")

	c.l.Sending(at(5 * time.Second))
	c.l.Sending(at(5*time.Second + renew)) // the first one counts
	un, _ = c.l.Unheard(at(6*time.Second), fence)
	assert.Assert(t, !un, "a has had 1 s since our first datagram")
	for d := 6*time.Second + renew; d <= 5*time.Second+fence; d += renew {
		c.hear("a", d, map[string]time.Duration{"b": 0})
	}
	un, _ = c.l.Unheard(at(5*time.Second+fence), fence)
	assert.Assert(t, un, "a never heard us in fence-after from our first datagram")
}
