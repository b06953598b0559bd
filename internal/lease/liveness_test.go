package lease_test

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/eip-project/eip/internal/lease"
)

const (
	renew    = 500 * time.Millisecond
	duration = 2 * time.Second
	ms       = time.Millisecond
)

// cluster feeds a Liveness the heartbeats a watch would deliver: each
// renewal of a node is a new Version observed at a given time.
type cluster struct {
	t        *testing.T
	l        *lease.Liveness
	versions map[string]int
}

func newCluster(t *testing.T) *cluster {
	// tail = one renew interval, break = two, as the agent wires it.
	return &cluster{t: t, l: lease.NewLiveness("self", renew, 2*renew), versions: map[string]int{}}
}

func (c *cluster) renew(node string, d time.Duration) {
	c.versions[node]++
	c.l.Observe(lease.Heartbeat{
		Node: node, Duration: duration, RenewTime: at(d),
		Version: strconv.Itoa(c.versions[node]),
	}, at(d))
}

// selfRenews delivers this node's own renewals every renew interval in [from, to].
func (c *cluster) selfRenews(from, to time.Duration) {
	for d := from; d <= to; d += renew {
		c.renew("self", d)
	}
}

func TestPeerAliveForItsDurationSinceObservedChange(t *testing.T) {
	c := newCluster(t)
	c.renew("peer", 0)
	c.selfRenews(0, 5*time.Second)

	assert.Assert(t, c.l.Alive("peer", at(duration-ms)))
	assert.Assert(t, !c.l.Alive("peer", at(duration)))
	since, ok := c.l.DeadSince("peer", at(3*time.Second))
	assert.Assert(t, ok)
	assert.Equal(t, since, at(duration))
}

func TestChangeExtendsLife(t *testing.T) {
	c := newCluster(t)
	c.renew("peer", 0)
	c.selfRenews(0, 1500*ms)
	c.renew("peer", 1500*ms)
	c.selfRenews(2000*ms, 4*time.Second)

	assert.Assert(t, c.l.Alive("peer", at(3499*ms)))
	assert.Assert(t, !c.l.Alive("peer", at(3500*ms)))
	_, ok := c.l.DeadSince("peer", at(3499*ms))
	assert.Assert(t, !ok, "alive nodes have no DeadSince")
}

// Seeing the same version again is not a change: a node whose Lease the
// informer resyncs without a renewal still dies.
func TestUnchangedVersionIsNoChange(t *testing.T) {
	c := newCluster(t)
	c.renew("peer", 0)
	c.selfRenews(0, 3*time.Second)
	c.l.Observe(lease.Heartbeat{Node: "peer", Duration: duration, Version: "1", Held: 7}, at(1900*ms))

	assert.Assert(t, !c.l.Alive("peer", at(duration)))
	h, ok := c.l.Heartbeat("peer")
	assert.Assert(t, ok)
	assert.Equal(t, h.Held, 7, "the status is still updated")
}

// Nobody is judged dead unless the stream delivered within the tail: when
// it has been quiet, the silence may be ours, not the peer's.
func TestNoDeathWhileStreamSilent(t *testing.T) {
	c := newCluster(t)
	c.renew("peer", 0)
	c.selfRenews(0, 1000*ms)

	// Last delivery at 1 s; at 2 s the stream has been quiet for 1 s > tail.
	assert.Assert(t, c.l.Alive("peer", at(duration)))
	assert.Assert(t, c.l.Alive("peer", at(time.Hour)))
	_, ok := c.l.DeadSince("peer", at(time.Hour))
	assert.Assert(t, !ok)

	// Just within the tail, the same peer is dead.
	c2 := newCluster(t)
	c2.renew("peer", 0)
	c2.selfRenews(0, 1500*ms)
	assert.Assert(t, !c2.l.Alive("peer", at(duration)), "stream delivered 500 ms ago, within the tail")
	assert.Assert(t, c2.l.Alive("peer", at(duration+ms)), "stream quiet for longer than the tail")
}

// An API-server restart: the stream is silent for longer than the break
// threshold, then resumes. No peer may die of the silence.
func TestBreakGrantsEveryPeerAFreshDuration(t *testing.T) {
	c := newCluster(t)
	c.renew("a", 0)
	c.renew("b", 500*ms)
	c.selfRenews(0, 1000*ms)
	assert.Assert(t, c.l.Connected(at(1000*ms)))
	assert.Assert(t, !c.l.Connected(at(5*time.Second)))

	// The API server is back at 10 s; our own renewal arrives first.
	c.renew("self", 10*time.Second)
	assert.Assert(t, c.l.Connected(at(10*time.Second)))
	c.selfRenews(10*time.Second+renew, 15*time.Second)
	for _, n := range []string{"a", "b"} {
		assert.Assert(t, c.l.Alive(n, at(12*time.Second-ms)), n)
		assert.Assert(t, !c.l.Alive(n, at(12*time.Second)), n)
		since, ok := c.l.DeadSince(n, at(13*time.Second))
		assert.Assert(t, ok, n)
		assert.Equal(t, since, at(12*time.Second), n)
	}
}

// A pause shorter than the break threshold is no break: a peer silent for
// its whole duration is dead as soon as the stream is seen delivering.
func TestShortPauseIsNoBreak(t *testing.T) {
	c := newCluster(t)
	c.renew("peer", 0)
	c.selfRenews(0, 1500*ms)
	c.renew("self", 2200*ms) // 700 ms pause: longer than the tail, shorter than the break
	assert.Assert(t, !c.l.Alive("peer", at(2200*ms)))
	since, ok := c.l.DeadSince("peer", at(2200*ms))
	assert.Assert(t, ok)
	assert.Equal(t, since, at(duration))
}

func TestSelfAlwaysAliveNeverObservedNot(t *testing.T) {
	c := newCluster(t)
	c.renew("self", 0)
	c.renew("peer", 0)
	c.renew("peer", 10*time.Hour) // keeps the stream fresh
	assert.Assert(t, c.l.Alive("self", at(10*time.Hour)))
	_, ok := c.l.DeadSince("self", at(10*time.Hour))
	assert.Assert(t, !ok)

	assert.Assert(t, !c.l.Alive("ghost", at(0)))
	_, ok = c.l.DeadSince("ghost", at(0))
	assert.Assert(t, !ok, "a never-observed node has no death time")
}

// A deleted heartbeat (by hand, or at a graceful shutdown) does not make a
// peer dead: it keeps its lease duration from its last change, not
// eligible, and is forgotten once dead; writing the heartbeat again is a
// change like any other.
func TestGone(t *testing.T) {
	c := newCluster(t)
	c.l.Observe(lease.Heartbeat{Node: "peer", Duration: duration, Eligible: true, Version: "1"}, at(0))
	c.renew("self", 0)
	c.l.Gone("peer", at(100*ms))
	c.selfRenews(500*ms, 3*time.Second)
	assert.Assert(t, c.l.Alive("peer", at(duration-ms)), "alive for the rest of its duration")
	hb, ok := c.l.Heartbeat("peer")
	assert.Assert(t, ok && !hb.Eligible, "but not eligible")
	assert.Assert(t, !c.l.Alive("peer", at(duration)))
	c.l.Gone("peer", at(duration))
	_, ok = c.l.Heartbeat("peer")
	assert.Assert(t, !ok, "forgotten once dead")
	assert.DeepEqual(t, c.l.Nodes(), []string{"self"})

	c.l.Gone("self", at(3*time.Second))
	_, ok = c.l.Heartbeat("self")
	assert.Assert(t, !ok, "this node is forgotten at once")
}

func TestGoneThenWrittenAgain(t *testing.T) {
	c := newCluster(t)
	c.l.Observe(lease.Heartbeat{Node: "peer", Duration: duration, Eligible: true, Version: "1"}, at(0))
	c.l.Gone("peer", at(100*ms))
	c.l.Observe(lease.Heartbeat{Node: "peer", Duration: duration, Eligible: true, Version: "2"}, at(400*ms))
	c.selfRenews(500*ms, 3*time.Second)
	hb, _ := c.l.Heartbeat("peer")
	assert.Assert(t, hb.Eligible, "eligible again")
	assert.Assert(t, c.l.Alive("peer", at(400*ms+duration-ms)), "alive for a duration from the new change")
	assert.Assert(t, !c.l.Alive("peer", at(400*ms+duration)))
}

func TestNodes(t *testing.T) {
	c := newCluster(t)
	for _, n := range []string{"c", "a", "self", "b"} {
		c.renew(n, 0)
	}
	got := c.l.Nodes()
	slices.Sort(got)
	assert.DeepEqual(t, got, []string{"a", "b", "c", "self"})
}

func TestNextExpiry(t *testing.T) {
	c := newCluster(t)
	_, ok := c.l.NextExpiry(at(0))
	assert.Assert(t, !ok, "nobody observed")

	c.renew("self", 0)
	_, ok = c.l.NextExpiry(at(0))
	assert.Assert(t, !ok, "self never expires")

	c.renew("a", 0)
	c.renew("b", time.Second)
	next, ok := c.l.NextExpiry(at(500 * ms))
	assert.Assert(t, ok)
	assert.Equal(t, next, at(2*time.Second))

	next, ok = c.l.NextExpiry(at(2 * time.Second))
	assert.Assert(t, ok)
	assert.Equal(t, next, at(3*time.Second), "an expiry at now is past")

	_, ok = c.l.NextExpiry(at(3 * time.Second))
	assert.Assert(t, !ok)
}

// SelfSeenSince is the barrier before binding again: our own renewal,
// stamped on our own clock, has come back through the stream.
func TestSelfSeenSince(t *testing.T) {
	l := lease.NewLiveness("self", renew, 2*renew)
	assert.Assert(t, !l.SelfSeenSince(at(0)))

	l.Observe(lease.Heartbeat{Node: "peer", Duration: duration, RenewTime: at(time.Hour), Version: "1"}, at(0))
	assert.Assert(t, !l.SelfSeenSince(at(0)), "a peer's renewal proves nothing about ours")

	l.Observe(lease.Heartbeat{Node: "self", Duration: duration, RenewTime: at(5 * time.Second), Version: "2"}, at(5*time.Second+3*ms))
	assert.Assert(t, l.SelfSeenSince(at(4*time.Second)))
	assert.Assert(t, l.SelfSeenSince(at(5*time.Second)))
	assert.Assert(t, !l.SelfSeenSince(at(5*time.Second+ms)))
}

func TestSetTimings(t *testing.T) {
	c := newCluster(t)
	c.renew("peer", 0)
	c.selfRenews(0, 1000*ms)
	assert.Assert(t, c.l.Alive("peer", at(duration)), "quiet for 1 s, longer than the 500 ms tail")
	c.l.SetTimings(time.Second, 2*time.Second)
	assert.Assert(t, !c.l.Alive("peer", at(duration)), "quiet for 1 s, within the new 1 s tail")
}

// Other objects on the same watch (locks) prove it delivers as well as a
// heartbeat does: with them arriving, a peer silent for its duration is
// dead though no heartbeat changed within the tail, and stays dead.
func TestDeliveredKeepsTheStreamFresh(t *testing.T) {
	c := newCluster(t)
	c.renew("peer", 0)
	c.selfRenews(0, 1000*ms)
	for d := 1100 * ms; d <= 4*time.Second; d += 300 * ms {
		c.l.Delivered(at(d))
	}
	assert.Assert(t, !c.l.Alive("peer", at(duration+ms)), "a lock arrived within the tail")
	assert.Assert(t, !c.l.Alive("peer", at(4*time.Second)))
	assert.Assert(t, c.l.Connected(at(4*time.Second)))
	assert.Assert(t, c.l.Alive("peer", at(4*time.Second+renew+ms)), "nothing delivered for longer than the tail")
}

// A lock arriving after a silence longer than the break is a resumed
// stream, as a heartbeat would be: every peer gets a fresh duration.
func TestDeliveredAfterABreakGrantsAFreshDuration(t *testing.T) {
	c := newCluster(t)
	c.renew("peer", 0)
	c.selfRenews(0, 1000*ms)
	c.l.Delivered(at(10 * time.Second))
	for d := 10*time.Second + 300*ms; d <= 13*time.Second; d += 300 * ms {
		c.l.Delivered(at(d))
	}
	assert.Assert(t, c.l.Alive("peer", at(12*time.Second-ms)))
	assert.Assert(t, !c.l.Renewing("peer", at(11*time.Second)), "presumed, not seen renewing")
	since, ok := c.l.DeadSince("peer", at(12*time.Second))
	assert.Assert(t, ok)
	assert.Equal(t, since, at(12*time.Second))
}

// A lock write naming a node its holder, by another node, vouches for it:
// alive (not renewing) for its duration from when the write was seen, and
// dead only at the end of that; the next expiry says when.
func TestVouchedKeepsANodeAliveForItsDuration(t *testing.T) {
	c := newCluster(t)
	c.renew("peer", 0)
	c.selfRenews(0, 6*time.Second)
	assert.Assert(t, !c.l.Alive("peer", at(3*time.Second)))

	c.l.Vouched("peer", at(3*time.Second))
	assert.Assert(t, c.l.Alive("peer", at(3*time.Second)))
	assert.Assert(t, !c.l.Renewing("peer", at(3*time.Second)), "a vouch is not a renewal")
	next, ok := c.l.NextExpiry(at(3 * time.Second))
	assert.Assert(t, ok)
	assert.Equal(t, next, at(3*time.Second+duration))
	assert.Assert(t, c.l.Alive("peer", at(3*time.Second+duration-ms)))
	assert.Assert(t, !c.l.Alive("peer", at(3*time.Second+duration)))
	since, ok := c.l.DeadSince("peer", at(6*time.Second))
	assert.Assert(t, ok)
	assert.Equal(t, since, at(3*time.Second+duration))

	c.l.Vouched("self", at(4*time.Second))
	c.l.Vouched("stranger", at(4*time.Second))
	assert.Assert(t, !c.l.Alive("stranger", at(4*time.Second)), "a node never observed stays unknown")
}
