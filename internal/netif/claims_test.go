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
	n.goIn(t, n.b, func(ctx context.Context) error { return WatchClaims(ctx, log, vethIface, nil, claims, nil) })
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

// A watch's backlog counts the frames it has not reported: while its
// consumer reads nothing, frames wait (in the socket, or read and not yet
// sent on) and Unread says so; once every claim is consumed and the
// socket is empty, it says none. A backlog with no watch has none.
func TestBacklogCountsWhatTheWatchHasNotReported(t *testing.T) {
	var idle Backlog
	assert.Assert(t, !idle.Unread())
	assert.Assert(t, !(*Backlog)(nil).Unread())

	n := newTestNet(t)
	log := testLogger(t)
	claims := make(chan Claim) // read only below
	backlog := new(Backlog)
	n.goIn(t, n.b, func(ctx context.Context) error { return WatchClaims(ctx, log, vethIface, nil, claims, backlog) })
	var s *rawSender
	n.in(t, n.a, func() { s = newRawSender(log) })
	t.Cleanup(s.close)
	first := netip.MustParseAddr("198.18.10.1")
	awaitClaim(t, claims, first, func() error { _, err := s.send(vethIface, first); return err })

	ips := []netip.Addr{netip.MustParseAddr("198.18.10.2"), netip.MustParseAddr("198.18.10.3")}
	_, err := s.send(vethIface, ips...)
	assert.NilError(t, err)
	waitUntil(t, "the frames wait unreported", backlog.Unread)
	seen := map[netip.Addr]bool{}
	deadline := time.After(10 * time.Second)
	for !seen[ips[0]] || !seen[ips[1]] {
		select {
		case c := <-claims:
			seen[c.IP] = true
		case <-deadline:
			t.Fatalf("saw only %v", seen)
		}
	}
	// Claims of other frames (the kernel's own IPv6) may follow: read
	// them as the consumer would until nothing waits.
	waitUntil(t, "the backlog read", func() bool {
		for {
			select {
			case <-claims:
			default:
				return !backlog.Unread()
			}
		}
	})
}
