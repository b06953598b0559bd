package lease_test

import (
	"testing"
	"time"

	"gotest.tools/v3/assert"
)

// A dead peer is not judged dead while the stream is quiet, but it is not
// seen renewing either: it keeps its IPs and is given none.
func TestQuietStreamKeepsDeadPeerAliveButNotRenewing(t *testing.T) {
	c := newCluster(t)
	c.renew("peer", 0)
	c.selfRenews(0, 2500*ms)

	assert.Assert(t, c.l.Renewing("peer", at(duration-ms)))
	assert.Assert(t, !c.l.Renewing("peer", at(duration)))
	// The stream goes quiet after 2.5 s: the peer is alive again, as far
	// as taking its IPs goes, and still not renewing.
	assert.Assert(t, c.l.Alive("peer", at(3100*ms)))
	assert.Assert(t, !c.l.Renewing("peer", at(3100*ms)))
	assert.Assert(t, c.l.Renewing("self", at(time.Hour)), "this node always renews")
	assert.Assert(t, !c.l.Renewing("ghost", at(0)), "a never-observed node does not")
}

// After a break every peer gets a fresh duration to show it still renews;
// until its heartbeat changes it is alive but not renewing.
func TestBreakPresumesPeersAliveUntilTheyRenew(t *testing.T) {
	c := newCluster(t)
	c.renew("a", 0)
	c.renew("b", 0)
	c.selfRenews(0, 1000*ms)

	c.renew("self", 10*time.Second) // the stream is back after a break
	assert.Assert(t, c.l.Alive("a", at(10*time.Second)))
	assert.Assert(t, !c.l.Renewing("a", at(10*time.Second)), "presumed, not seen")
	c.renew("a", 10200*ms)
	c.selfRenews(10500*ms, 11*time.Second)
	assert.Assert(t, c.l.Renewing("a", at(11*time.Second)))
	assert.Assert(t, c.l.Alive("b", at(11*time.Second)))
	assert.Assert(t, !c.l.Renewing("b", at(11*time.Second)))
}
