package netif

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	clocktesting "k8s.io/utils/clock/testing"
)

// A question from A for an address B holds is answered by B's kernel, and
// the answer reaches A's WatchClaims as B's claim; B's own WatchClaims sees
// the question as a claim of A's address alone, never as a probe of B's
// (a holder cut off from the API server yields to a probe). IPv4 asks
// from A's first address, IPv6 from its link-local one.
func TestAskIsAnsweredAndClaimsNothingOfTheHolders(t *testing.T) {
	n := newTestNet(t)
	log := testLogger(t)
	atA, atB := make(chan Claim, 64), make(chan Claim, 64)
	n.goIn(t, n.a, func(ctx context.Context) error { return WatchClaims(ctx, log, vethIface, nil, atA, nil) })
	n.goIn(t, n.b, func(ctx context.Context) error { return WatchClaims(ctx, log, vethIface, nil, atB, nil) })
	var ann *Announcer
	n.in(t, n.a, func() { ann = NewAnnouncer(log, clocktesting.NewFakeClock(time.Now()), nil) })
	t.Cleanup(ann.Close)

	held := netip.MustParseAddr("198.18.0.80")
	assert.ErrorContains(t, ann.Ask(vethIface, held), "no address to ask from")

	n.ip(t, n.a, "addr", "add", "198.18.0.60/16", "dev", vethIface)
	n.ip(t, n.a, "addr", "add", "198.18.0.61/16", "dev", vethIface) // a secondary: not the source
	n.ip(t, n.a, "addr", "add", "fe80::60/64", "dev", vethIface, "nodad")
	n.ip(t, n.b, "addr", "add", "198.18.0.80/16", "dev", vethIface)
	n.ip(t, n.b, "addr", "add", "2001:db8::80/64", "dev", vethIface, "nodad")
	macA, macB := n.mac(t, n.a), n.mac(t, n.b)
	for _, tc := range []struct{ held, src string }{{"198.18.0.80", "198.18.0.60"}, {"2001:db8::80", "fe80::60"}} {
		ip := netip.MustParseAddr(tc.held)
		c := awaitClaim(t, atA, ip, func() error { return ann.Ask(vethIface, ip) })
		assert.DeepEqual(t, c.MAC, macB)
		assert.Assert(t, !c.Probe)
		c = awaitClaim(t, atB, netip.MustParseAddr(tc.src), func() error { return nil })
		assert.DeepEqual(t, c.MAC, macA)
		assert.Assert(t, !c.Probe, "%s asked as a probe", tc.held)
	}
	for {
		select {
		case c := <-atB:
			assert.Assert(t, c.IP != netip.MustParseAddr("198.18.0.80") && c.IP != netip.MustParseAddr("2001:db8::80"), "the holder read a question as a claim: %+v", c)
		default:
			return
		}
	}
}
