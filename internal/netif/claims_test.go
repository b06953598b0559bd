package netif

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"gotest.tools/v3/assert"
)

// A watch whose consumer stops reading lets its socket fill; the frames
// the kernel then drops are reported, as a claim naming no IP, once the
// consumer reads again: whoever judges silence learns it may have missed
// answers.
func TestWatchClaimsReportsDroppedFrames(t *testing.T) {
	n := newTestNet(t)
	log := testLogger(t)
	claims := make(chan Claim) // nobody reads it until the frames are sent
	n.goIn(t, n.b, func(ctx context.Context) error { return WatchClaims(ctx, log, vethIface, nil, claims) })
	var s *rawSender
	n.in(t, n.a, func() { s = newRawSender(log) })
	t.Cleanup(s.close)
	// The watch may not listen yet: send until a claim is read.
	first := netip.MustParseAddr("198.18.8.1")
	awaitClaim(t, claims, first, func() error { _, err := s.send(vethIface, first); return err })
	// Some 16,000 frames, far more than a default socket buffer holds.
	var ips []netip.Addr
	for i := range maxBatch {
		ips = append(ips, netip.AddrFrom4([4]byte{198, 18, 9, byte(i + 1)}))
	}
	for range 128 {
		_, err := s.send(vethIface, ips...)
		assert.NilError(t, err)
	}
	deadline := time.After(10 * time.Second)
	for {
		select {
		case c := <-claims:
			if c.Dropped > 0 {
				assert.Equal(t, c.Iface, vethIface)
				assert.Assert(t, !c.IP.IsValid(), "a report of dropped frames names %s", c.IP)
				return
			}
		case <-deadline:
			t.Fatal("no report of dropped frames within 10s")
		}
	}
}
