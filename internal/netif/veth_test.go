package netif

// Privileged tests: real netlink, AF_PACKET sockets and kernel neighbour
// tables, on a veth pair between two network namespaces made for each test.

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mdlayher/packet"
	"golang.org/x/sys/unix"
	"gotest.tools/v3/assert"
	"gotest.tools/v3/poll"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
)

const forever = 0xFFFFFFFF

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	poll.WaitOn(t, func(poll.LogT) poll.Result {
		if cond() {
			return poll.Success()
		}
		return poll.Continue("%s", what)
	}, poll.WithTimeout(10*time.Second), poll.WithDelay(20*time.Millisecond))
}

// waitFor reads ch until want arrives, skipping other values.
func waitFor[T comparable](t *testing.T, ch <-chan T, want T) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case got := <-ch:
			if got == want {
				return
			}
			t.Logf("skipping %+v while waiting for %+v", got, want)
		case <-deadline:
			t.Fatalf("no %+v within 10s", want)
		}
	}
}

func TestAddressesOnVeth(t *testing.T) {
	n := newTestNet(t)
	var addrs *Addresses
	n.in(t, n.a, func() { addrs = NewAddresses(testLogger(t)) })
	t.Cleanup(addrs.Close)

	t.Run("prefix length and lifetime", func(t *testing.T) {
		for _, tc := range []struct {
			prefix   string
			lifetime time.Duration
			valid    uint32
		}{
			{"198.18.0.10/24", 30 * time.Second, 30},
			{"198.18.0.11/32", 30 * time.Second, 30},
			{"2001:db8::10/64", 30 * time.Second, 30},
			{"2001:db8::11/128", 30 * time.Second, 30},
			{"198.18.0.12/32", 0, forever},
			{"2001:db8::12/128", 0, forever},
			{"198.18.0.13/32", 300 * time.Millisecond, 1},
			{"198.18.0.14/32", 2900 * time.Millisecond, 2},
		} {
			p := netip.MustParsePrefix(tc.prefix)
			assert.NilError(t, addrs.Add(vethIface, p, tc.lifetime))
			got := n.addr(t, n.a, vethIface, p.Addr().String())
			assert.Equal(t, len(got), 1, "%s: %+v", p, got)
			assert.Equal(t, got[0].PrefixLen, p.Bits(), p)
			assert.Equal(t, got[0].Scope, "global", p)
			// A second may pass between binding and looking.
			assert.Assert(t, got[0].ValidLft == tc.valid || got[0].ValidLft == tc.valid-1, "%s: valid_lft %d, want %d", p, got[0].ValidLft, tc.valid)
			assert.Equal(t, got[0].PrefLft, got[0].ValidLft, p)
		}
	})

	t.Run("add again refreshes the lifetime", func(t *testing.T) {
		for _, s := range []string{"198.18.0.20/32", "2001:db8::20/128"} {
			p := netip.MustParsePrefix(s)
			assert.NilError(t, addrs.Add(vethIface, p, 3*time.Second))
			waitUntil(t, "valid_lft of "+s+" to count down", func() bool {
				got := n.addr(t, n.a, vethIface, p.Addr().String())
				return len(got) == 1 && got[0].ValidLft <= 2
			})
			assert.NilError(t, addrs.Add(vethIface, p, 3*time.Second))
			got := n.addr(t, n.a, vethIface, p.Addr().String())
			assert.Equal(t, len(got), 1)
			assert.Equal(t, got[0].ValidLft, uint32(3), s)
		}
	})

	t.Run("address expires unless refreshed", func(t *testing.T) {
		for _, s := range []string{"198.18.0.21/32", "2001:db8::21/128"} {
			p := netip.MustParsePrefix(s)
			start := time.Now()
			assert.NilError(t, addrs.Add(vethIface, p, time.Second))
			assert.Equal(t, len(n.addr(t, n.a, vethIface, p.Addr().String())), 1)
			waitUntil(t, s+" to expire", func() bool {
				return len(n.addr(t, n.a, vethIface, p.Addr().String())) == 0
			})
			t.Logf("%s with a 1 s lifetime was gone after %v", s, time.Since(start).Round(time.Millisecond))
		}
	})

	t.Run("add replaces another prefix length", func(t *testing.T) {
		for _, tc := range [][2]string{{"198.18.0.22/24", "198.18.0.22/32"}, {"2001:db8::22/64", "2001:db8::22/128"}} {
			first, second := netip.MustParsePrefix(tc[0]), netip.MustParsePrefix(tc[1])
			assert.NilError(t, addrs.Add(vethIface, first, 30*time.Second))
			assert.NilError(t, addrs.Add(vethIface, second, 30*time.Second))
			got := n.addr(t, n.a, vethIface, first.Addr().String())
			assert.Equal(t, len(got), 1, "%+v", got)
			assert.Equal(t, got[0].PrefixLen, second.Bits())
		}
	})

	t.Run("del removes every prefix length and is idempotent", func(t *testing.T) {
		n.ip(t, n.a, "addr", "add", "198.18.0.23/24", "dev", vethIface)
		n.ip(t, n.a, "addr", "add", "198.18.0.23/32", "dev", vethIface)
		n.ip(t, n.a, "addr", "add", "2001:db8::23/64", "dev", vethIface, "nodad")
		for _, s := range []string{"198.18.0.23/28", "2001:db8::23/128"} {
			p := netip.MustParsePrefix(s)
			assert.NilError(t, addrs.Del(vethIface, p))
			assert.Equal(t, len(n.addr(t, n.a, vethIface, p.Addr().String())), 0, s)
			assert.NilError(t, addrs.Del(vethIface, p))
			assert.NilError(t, addrs.Del("nosuch0", p))
		}
	})

	t.Run("del keeps the subnet's secondaries", func(t *testing.T) {
		n.sysctl(t, n.a, "net.ipv4.conf."+vethIface+".promote_secondaries=0")
		primary, secondary := netip.MustParsePrefix("198.18.5.1/24"), netip.MustParsePrefix("198.18.5.2/24")
		assert.NilError(t, addrs.Add(vethIface, primary, 30*time.Second))
		assert.NilError(t, addrs.Add(vethIface, secondary, 30*time.Second))
		assert.NilError(t, addrs.Del(vethIface, primary))
		assert.Equal(t, len(n.addr(t, n.a, vethIface, "198.18.5.1")), 0)
		assert.Equal(t, len(n.addr(t, n.a, vethIface, "198.18.5.2")), 1, "the kernel dropped the secondary with its primary")
	})

	t.Run("list", func(t *testing.T) {
		assert.NilError(t, addrs.Add(vethIface, netip.MustParsePrefix("198.18.0.24/32"), 30*time.Second))
		got, err := addrs.List(vethIface)
		assert.NilError(t, err)
		assert.Assert(t, slices.Contains(got, netip.MustParsePrefix("198.18.0.24/32")), "%v", got)
		assert.Assert(t, slices.Contains(got, netip.MustParsePrefix("2001:db8::10/64")), "%v", got)
		for _, p := range got {
			assert.Assert(t, !p.Addr().IsLinkLocalUnicast(), "link-local %s listed", p)
		}
		_, err = addrs.List("nosuch0")
		assert.ErrorContains(t, err, "list addresses on nosuch0")
	})

	t.Run("iface for", func(t *testing.T) {
		n.ip(t, n.a, "link", "add", "other0", "type", "veth", "peer", "name", "other1")
		n.ip(t, n.a, "addr", "add", "198.19.0.1/24", "dev", "other0")
		for ip, want := range map[string]string{
			"198.18.0.99":   vethIface, // in 198.18.0.10/24
			"198.19.0.7":    "other0",
			"2001:db8::99":  vethIface, // in 2001:db8::10/64
			"198.18.0.11":   vethIface,
			"198.19.255.1":  "",
			"2001:db8:1::1": "",
		} {
			got, err := addrs.IfaceFor(netip.MustParseAddr(ip))
			if want == "" {
				assert.ErrorContains(t, err, "no connected subnet")
				continue
			}
			assert.NilError(t, err, ip)
			assert.Equal(t, got, want, ip)
		}
	})

	t.Run("hardware address and carrier", func(t *testing.T) {
		mac, err := addrs.HardwareAddr(vethIface)
		assert.NilError(t, err)
		assert.DeepEqual(t, mac, n.mac(t, n.a))
		up, err := addrs.Up(vethIface)
		assert.NilError(t, err)
		assert.Assert(t, up)
		n.ip(t, n.b, "link", "set", vethIface, "down")
		up, err = addrs.Up(vethIface)
		assert.NilError(t, err)
		assert.Assert(t, !up, "peer down, yet carrier")
		n.ip(t, n.b, "link", "set", vethIface, "up")
		_, err = addrs.Up("nosuch0")
		assert.ErrorContains(t, err, "nosuch0")
		macs, err := addrs.MACs()
		assert.NilError(t, err)
		assert.Assert(t, slices.ContainsFunc(macs, func(m net.HardwareAddr) bool { return m.String() == mac.String() }), "%v", macs)
		assert.Assert(t, !slices.ContainsFunc(macs, func(m net.HardwareAddr) bool { return len(m) != 6 || m.String() == "00:00:00:00:00:00" }), "loopback has no MAC: %v", macs)
	})

	t.Run("interface recreated under the same name", func(t *testing.T) {
		p := netip.MustParsePrefix("198.18.0.40/32")
		n.ip(t, n.a, "link", "add", "eipre0", "type", "veth", "peer", "name", "eipre1")
		assert.NilError(t, addrs.Add("eipre0", p, 30*time.Second))
		n.ip(t, n.a, "link", "del", "eipre0")
		n.ip(t, n.a, "link", "add", "eipre0", "type", "veth", "peer", "name", "eipre1")
		t.Cleanup(func() { n.ip(t, n.a, "link", "del", "eipre0") })
		assert.NilError(t, addrs.Add("eipre0", p, 30*time.Second), "the interface looked up before is gone")
		assert.Equal(t, len(n.addr(t, n.a, "eipre0", p.Addr().String())), 1)
	})
}

func TestWatchOnVeth(t *testing.T) {
	n := newTestNet(t)
	n.ip(t, n.a, "addr", "add", "198.18.0.30/32", "dev", vethIface)
	addrEv := make(chan AddrEvent, 64)
	linkEv := make(chan LinkEvent, 64)
	log := testLogger(t)
	n.goIn(t, n.a, func(ctx context.Context) error { return Watch(ctx, log, addrEv, linkEv) })

	// The current state comes first.
	waitFor(t, addrEv, AddrEvent{vethIface, netip.MustParsePrefix("198.18.0.30/32"), true})
	waitFor(t, linkEv, LinkEvent{vethIface, true})

	for _, s := range []string{"198.18.0.31/32", "2001:db8::31/128"} {
		p := netip.MustParsePrefix(s)
		n.ip(t, n.a, "addr", "add", s, "dev", vethIface, "nodad")
		waitFor(t, addrEv, AddrEvent{vethIface, p, true})
		n.ip(t, n.a, "addr", "replace", s, "dev", vethIface, "nodad", "valid_lft", "100", "preferred_lft", "100")
		n.ip(t, n.a, "addr", "del", s, "dev", vethIface)
		// The refresh in between is not an event.
		select {
		case got := <-addrEv:
			assert.Equal(t, got, AddrEvent{vethIface, p, false})
		case <-time.After(10 * time.Second):
			t.Fatalf("no removal of %s within 10s", s)
		}
	}

	n.ip(t, n.b, "link", "set", vethIface, "down")
	waitFor(t, linkEv, LinkEvent{vethIface, false})
	n.ip(t, n.b, "link", "set", vethIface, "up")
	waitFor(t, linkEv, LinkEvent{vethIface, true})
	n.ip(t, n.a, "link", "set", vethIface, "down")
	waitFor(t, linkEv, LinkEvent{vethIface, false})
}

func TestAnnounceUpdatesPeerNeighbours(t *testing.T) {
	n := newTestNet(t)
	n.ip(t, n.b, "addr", "add", "198.18.0.2/24", "dev", vethIface)
	n.ip(t, n.b, "addr", "add", "2001:db8::2/64", "dev", vethIface, "nodad")
	var addrs *Addresses
	var ann *Announcer
	n.in(t, n.a, func() {
		addrs = NewAddresses(testLogger(t))
		ann = NewAnnouncer(testLogger(t), clock.RealClock{}, nil)
	})
	t.Cleanup(addrs.Close)
	t.Cleanup(ann.Close)
	macA := n.mac(t, n.a).String()
	const wrongMAC = "02:00:00:00:00:99"

	bindAndAnnounce := func(s string) {
		t.Helper()
		p := netip.MustParsePrefix(s)
		assert.NilError(t, addrs.Add(vethIface, p, 30*time.Second))
		assert.NilError(t, ann.Announce(vethIface, p.Addr()))
	}
	peerLearns := func(ip string) {
		t.Helper()
		waitUntil(t, "peer's neighbour entry for "+ip+" to point at "+macA, func() bool {
			mac, _ := n.neigh(t, n.b, ip)
			return mac == macA
		})
	}

	t.Run("IPv4 stale entry", func(t *testing.T) {
		n.ip(t, n.b, "neigh", "replace", "198.18.0.40", "lladdr", wrongMAC, "dev", vethIface, "nud", "stale")
		bindAndAnnounce("198.18.0.40/32")
		peerLearns("198.18.0.40")
	})

	t.Run("IPv4 no entry, peer accepts gratuitous ARP", func(t *testing.T) {
		n.sysctl(t, n.b, "net.ipv4.conf."+vethIface+".arp_accept=1")
		mac, _ := n.neigh(t, n.b, "198.18.0.41")
		assert.Equal(t, mac, "")
		bindAndAnnounce("198.18.0.41/32")
		peerLearns("198.18.0.41")
	})

	t.Run("IPv6 entry overridden", func(t *testing.T) {
		// Linux takes unsolicited NAs only for entries it has.
		n.ip(t, n.b, "neigh", "replace", "2001:db8::40", "lladdr", wrongMAC, "dev", vethIface, "nud", "stale")
		bindAndAnnounce("2001:db8::40/128")
		peerLearns("2001:db8::40")
	})

	t.Run("no Ethernet link layer", func(t *testing.T) {
		err := ann.Announce("lo", netip.MustParseAddr("198.18.0.42"))
		assert.ErrorContains(t, err, "no Ethernet link layer")
	})
}

// awaitClaim announces until the watcher, which gives no sign of being
// ready, reports ip; it returns that claim.
func awaitClaim(t *testing.T, claims <-chan Claim, ip netip.Addr, announce func() error) Claim {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		assert.NilError(t, announce())
		retry := time.After(100 * time.Millisecond)
		for waiting := true; waiting; {
			select {
			case c := <-claims:
				if c.IP == ip {
					return c
				}
			case <-retry:
				waiting = false
			case <-deadline:
				t.Fatalf("no claim for %s within 10s", ip)
			}
		}
	}
}

func waitForClaim(t *testing.T, claims <-chan Claim, ip netip.Addr, mac net.HardwareAddr) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case c := <-claims:
			if c.IP == ip && bytes.Equal(c.MAC, mac) {
				return
			}
		case <-deadline:
			t.Fatalf("no claim for %s at %s within 10s", ip, mac)
		}
	}
}

func TestWatchClaimsOnVeth(t *testing.T) {
	n := newTestNet(t)
	claims := make(chan Claim, 64)
	log := testLogger(t)
	n.goIn(t, n.a, func(ctx context.Context) error { return WatchClaims(ctx, log, vethIface, nil, claims, nil) })
	clk := clocktesting.NewFakeClock(time.Now())
	var annA, annB *Announcer
	n.in(t, n.a, func() { annA = NewAnnouncer(log, clk, nil) })
	n.in(t, n.b, func() { annB = NewAnnouncer(log, clk, []time.Duration{250 * time.Millisecond}) })
	t.Cleanup(annA.Close)
	t.Cleanup(annB.Close)
	macB := n.mac(t, n.b)

	theirs := netip.MustParseAddr("198.18.0.50")
	c := awaitClaim(t, claims, theirs, func() error { return annB.Announce(vethIface, theirs) })
	assert.Equal(t, c.Iface, vethIface)
	assert.DeepEqual(t, c.MAC, macB)

	t.Run("repeats go out on the wire", func(t *testing.T) {
		repeated := netip.MustParseAddr("198.18.0.52")
		assert.NilError(t, annB.Announce(vethIface, repeated))
		waitForClaim(t, claims, repeated, macB)
		waitUntil(t, "B's repeat timer", clk.HasWaiters)
		// Drain the reply that came with the first request.
		waitForClaim(t, claims, repeated, macB)
		clk.Step(250 * time.Millisecond)
		waitForClaim(t, claims, repeated, macB)
	})

	t.Run("IPv6", func(t *testing.T) {
		ip := netip.MustParseAddr("2001:db8::50")
		c := awaitClaim(t, claims, ip, func() error { return annB.Announce(vethIface, ip) })
		assert.DeepEqual(t, c.MAC, macB)
	})

	t.Run("survives the link going down and up", func(t *testing.T) {
		n.ip(t, n.a, "link", "set", vethIface, "down")
		n.ip(t, n.a, "link", "set", vethIface, "up")
		ip := netip.MustParseAddr("198.18.0.53")
		c := awaitClaim(t, claims, ip, func() error { return annB.Announce(vethIface, ip) })
		assert.DeepEqual(t, c.MAC, macB)
	})

	t.Run("own announcements are not claims", func(t *testing.T) {
		for _, s := range []string{"198.18.0.60", "2001:db8::60"} {
			assert.NilError(t, annA.Announce(vethIface, netip.MustParseAddr(s)))
		}
		// Frames are seen in the order they cross the link: had A's own
		// been reported, they would come before B's marker.
		marker := netip.MustParseAddr("198.18.0.51")
		assert.NilError(t, annB.Announce(vethIface, marker))
		for {
			select {
			case c := <-claims:
				assert.DeepEqual(t, c.MAC, macB)
				if c.IP == marker {
					return
				}
			case <-time.After(10 * time.Second):
				t.Fatal("no marker claim within 10s")
			}
		}
	})
}

func TestWatchClaimsEndsWhenLinkDeleted(t *testing.T) {
	n := newTestNet(t)
	n.ip(t, n.a, "link", "add", "other0", "type", "veth", "peer", "name", "other1")
	n.ip(t, n.a, "link", "set", "other0", "up")
	n.ip(t, n.a, "link", "set", "other1", "up")
	claims := make(chan Claim, 64)
	errs := make(chan error, 1)
	log := testLogger(t)
	n.goIn(t, n.a, func(ctx context.Context) error {
		errs <- WatchClaims(ctx, log, "other0", nil, claims, nil)
		return nil
	})
	// Its socket is open once it reports a claim from the other end.
	var ann *Announcer
	n.in(t, n.a, func() { ann = NewAnnouncer(log, clock.RealClock{}, nil) })
	t.Cleanup(ann.Close)
	ip := netip.MustParseAddr("198.18.0.54")
	awaitClaim(t, claims, ip, func() error { return ann.Announce("other1", ip) })

	n.ip(t, n.a, "link", "del", "other0")
	select {
	case err := <-errs:
		assert.ErrorContains(t, err, "watch claims on other0: link gone")
	case <-time.After(10 * time.Second):
		t.Fatal("WatchClaims still running 10s after its link was deleted")
	}
}

// TestFirstAnnouncementLatency logs how long after the start of a bind the
// peer sees the first announcement. It measures; it does not judge.
func TestFirstAnnouncementLatency(t *testing.T) {
	n := newTestNet(t)
	claims := make(chan Claim, 256)
	log := testLogger(t)
	n.goIn(t, n.b, func(ctx context.Context) error { return WatchClaims(ctx, log, vethIface, nil, claims, nil) })
	var addrs *Addresses
	var ann *Announcer
	n.in(t, n.a, func() {
		addrs = NewAddresses(log)
		ann = NewAnnouncer(log, clock.RealClock{}, nil)
	})
	t.Cleanup(addrs.Close)
	t.Cleanup(ann.Close)
	macA := n.mac(t, n.a)

	warm := netip.MustParseAddr("198.18.0.70")
	awaitClaim(t, claims, warm, func() error { return ann.Announce(vethIface, warm) })

	const rounds = 50
	var bound, announced, seen []time.Duration
	for i := range rounds {
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, 1, byte(i + 1)}), 32)
		if i%2 == 1 {
			p = netip.PrefixFrom(netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 15: byte(i + 1)}), 128)
		}
		start := time.Now()
		assert.NilError(t, addrs.Add(vethIface, p, 30*time.Second))
		bound = append(bound, time.Since(start))
		assert.NilError(t, ann.Announce(vethIface, p.Addr()))
		announced = append(announced, time.Since(start))
		waitForClaim(t, claims, p.Addr(), macA)
		seen = append(seen, time.Since(start))
	}
	for _, m := range []struct {
		what string
		d    []time.Duration
	}{
		{"Add returned", bound},
		{"Announce returned (first packet written)", announced},
		{"peer read the first packet", seen},
	} {
		slices.Sort(m.d)
		t.Logf("%-42s p50 %8v  p90 %8v  max %8v  (%d binds, half IPv4, half IPv6)", m.what,
			m.d[len(m.d)/2], m.d[len(m.d)*9/10], m.d[len(m.d)-1], len(m.d))
	}
}

// BenchmarkAddRefresh measures one lifetime refresh with 1,000 addresses
// bound on the interface, the daemon's steady-state netlink load.
func BenchmarkAddRefresh(b *testing.B) {
	n := newTestNet(b)
	var addrs *Addresses
	n.in(b, n.a, func() { addrs = NewAddresses(slog.New(slog.DiscardHandler)) })
	b.Cleanup(addrs.Close)
	ps := make([]netip.Prefix, 1000)
	start := time.Now()
	for i := range ps {
		ps[i] = netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(i / 250), byte(i%250 + 1)}), 32)
		assert.NilError(b, addrs.Add(vethIface, ps[i], 30*time.Second))
	}
	b.Logf("first bind of %d addresses took %v", len(ps), time.Since(start))
	i := 0
	for b.Loop() {
		assert.NilError(b, addrs.Add(vethIface, ps[i%len(ps)], 30*time.Second))
		i++
	}
}

// A probe from A for an address B's kernel holds is answered, and the
// answer reaches WatchClaims as a claim from B's MAC; an address nobody
// holds gets no answer. IPv4 (ARP probe) and IPv6 (DAD NS).
func TestProbeIsAnsweredByHolder(t *testing.T) {
	n := newTestNet(t)
	claims := make(chan Claim, 64)
	log := testLogger(t)
	n.goIn(t, n.a, func(ctx context.Context) error { return WatchClaims(ctx, log, vethIface, nil, claims, nil) })
	var ann *Announcer
	n.in(t, n.a, func() { ann = NewAnnouncer(log, clocktesting.NewFakeClock(time.Now()), nil) })
	t.Cleanup(ann.Close)
	macB := n.mac(t, n.b)
	n.ip(t, n.b, "addr", "add", "198.18.0.70/16", "dev", vethIface)
	n.ip(t, n.b, "addr", "add", "2001:db8::70/64", "dev", vethIface, "nodad")
	for _, s := range []string{"198.18.0.70", "2001:db8::70"} {
		ip := netip.MustParseAddr(s)
		c := awaitClaim(t, claims, ip, func() error { return ann.Probe(vethIface, ip) })
		assert.DeepEqual(t, c.MAC, macB)
	}
	// Nobody holds .71: no claim for it before B's marker announcement.
	assert.NilError(t, ann.Probe(vethIface, netip.MustParseAddr("198.18.0.71")))
	var annB *Announcer
	n.in(t, n.b, func() { annB = NewAnnouncer(log, clocktesting.NewFakeClock(time.Now()), nil) })
	t.Cleanup(annB.Close)
	marker := netip.MustParseAddr("198.18.0.72")
	assert.NilError(t, annB.Announce(vethIface, marker))
	for {
		select {
		case c := <-claims:
			assert.Assert(t, c.IP != netip.MustParseAddr("198.18.0.71"), "a probe for a free address was answered by %s", c.MAC)
			if c.IP == marker {
				return
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no marker claim within 10s")
		}
	}
}

// Every frame of a batch of announcements, sent in one sendmmsg, reaches
// the peer, from this node's MAC; a watch there that wants only some
// addresses reports those alone; this node's own claim watch, which sees
// the frames its interface sends, reports none of them.
func TestBatchedAnnouncementsReachThePeer(t *testing.T) {
	n := newTestNet(t)
	log := testLogger(t)
	theirs, even, ours := make(chan Claim, 512), make(chan Claim, 512), make(chan Claim, 512)
	// The kernel's own IPv6 frames (a link-local address's duplicate
	// detection) reach the watches too, whenever the links come up.
	isEven := func(ip netip.Addr) bool { return ip.Is4() && ip.As4()[3]%2 == 0 }
	n.goIn(t, n.b, func(ctx context.Context) error { return WatchClaims(ctx, log, vethIface, nil, theirs, nil) })
	n.goIn(t, n.b, func(ctx context.Context) error { return WatchClaims(ctx, log, vethIface, isEven, even, nil) })
	n.goIn(t, n.a, func(ctx context.Context) error { return WatchClaims(ctx, log, vethIface, nil, ours, nil) })
	var s *rawSender
	n.in(t, n.a, func() { s = newRawSender(log) })
	t.Cleanup(s.close)
	macA := n.mac(t, n.a)
	ips := make([]netip.Addr, maxBatch)
	for i := range ips {
		ips[i] = netip.AddrFrom4([4]byte{198, 18, 7, byte(i + 1)})
	}
	// The watches may not listen yet: send until the first batch is seen.
	awaitClaim(t, theirs, ips[0], func() error {
		sent, err := s.send(vethIface, ips[0])
		assert.Equal(t, sent, 2)
		return err
	})
	for len(theirs) > 0 {
		<-theirs
	}
	sent, err := s.send(vethIface, ips...)
	assert.NilError(t, err)
	assert.Equal(t, sent, 2*len(ips))
	seen := map[netip.Addr]int{}
	deadline := time.After(10 * time.Second)
	for len(seen) < len(ips) || slices.ContainsFunc(ips, func(ip netip.Addr) bool { return seen[ip] < 2 }) {
		select {
		case c := <-theirs:
			assert.DeepEqual(t, c.MAC, macA)
			seen[c.IP]++
		case <-deadline:
			t.Fatalf("the peer saw %d of %d IPs: %v", len(seen), len(ips), seen)
		}
	}
	assert.Equal(t, len(ours), 0, "this node's watch reported its own frames")
	evens := map[netip.Addr]bool{}
	for len(evens) < len(ips)/2 {
		select {
		case c := <-even:
			assert.Assert(t, isEven(c.IP), "a claim the watch did not want: %s", c.IP)
			evens[c.IP] = true
		case <-deadline:
			t.Fatalf("the watch of even addresses saw %d of %d", len(evens), len(ips)/2)
		}
	}
}

// BenchmarkSendAnnouncements is one batch of repeats falling due together
// (maxBatch IPs, two frames each) put on a veth: what the announcer's
// goroutine spends on them, the kernel's delivery to the peer included.
func BenchmarkSendAnnouncements(b *testing.B) {
	n := newTestNet(b)
	var s *rawSender
	n.in(b, n.a, func() { s = newRawSender(slog.New(slog.DiscardHandler)) })
	b.Cleanup(s.close)
	ips := make([]netip.Addr, maxBatch)
	for i := range ips {
		ips[i] = netip.AddrFrom4([4]byte{198, 18, 7, byte(i + 1)})
	}
	b.ReportAllocs()
	began := processCPU(b)
	for b.Loop() {
		sent, err := s.send(vethIface, ips...)
		if err != nil || sent != 2*len(ips) {
			b.Fatalf("sent %d frames: %v", sent, err)
		}
	}
	b.ReportMetric(float64(processCPU(b)-began)/float64(b.N), "cpu-ns/op")
}

// processCPU is the CPU time this process used so far, the kernel's work
// on its behalf included: a benchmark's wall time on a loaded machine says
// little.
func processCPU(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// The claim watch's reader takes the frames waiting in one read.
func TestFrameReaderTakesWhatWaits(t *testing.T) {
	n := newTestNet(t)
	var s *rawSender
	n.in(t, n.a, func() { s = newRawSender(testLogger(t)) })
	t.Cleanup(s.close)
	var r *frameReader
	var c *packet.Conn
	n.in(t, n.b, func() {
		ifi, err := net.InterfaceByName(vethIface)
		assert.NilError(t, err)
		filter, err := claimFilter(ifi.HardwareAddr)
		assert.NilError(t, err)
		c, err = packet.Listen(ifi, packet.Raw, unix.ETH_P_ALL, &packet.Config{Filter: filter})
		assert.NilError(t, err)
		t.Cleanup(func() { c.Close() })
		r, err = newFrameReader(c, nil)
		assert.NilError(t, err)
	})
	ips := make([]netip.Addr, claimBatch/2)
	for i := range ips {
		ips[i] = netip.AddrFrom4([4]byte{198, 18, 8, byte(i + 1)})
	}
	sent, err := s.send(vethIface, ips...)
	assert.NilError(t, err)
	assert.Equal(t, sent, claimBatch)
	// Every frame queued on the socket (its statistics count them, and a
	// read of them starts the count again), however long the kernel took
	// on a loaded machine: one read then takes them all.
	var queued uint32
	poll.WaitOn(t, func(poll.LogT) poll.Result {
		st, err := c.Stats()
		if err != nil {
			return poll.Error(err)
		}
		if queued += st.Packets; queued < claimBatch {
			return poll.Continue("%d of %d frames queued", queued, claimBatch)
		}
		return poll.Success()
	}, poll.WithTimeout(10*time.Second), poll.WithDelay(10*time.Millisecond))
	got, err := r.read()
	assert.NilError(t, err)
	assert.Equal(t, got, claimBatch)
	for i := range got {
		ip, _, _, ok := parseClaim(r.frame(i), nil)
		assert.Assert(t, ok)
		assert.Equal(t, ip, ips[i/2])
	}
}

// BenchmarkClaimWatch is what the claim watch's own thread spends on the
// frames of another node's announcements (64 IPs, 128 frames an
// iteration), each reported: the read, the parse, the hand-off.
func BenchmarkClaimWatch(b *testing.B) {
	n := newTestNet(b)
	claims := make(chan Claim, 1024)
	var tid atomic.Int64
	n.goIn(b, n.b, func(ctx context.Context) error {
		tid.Store(int64(unix.Gettid()))
		return WatchClaims(ctx, slog.New(slog.DiscardHandler), vethIface, nil, claims, nil)
	})
	var s *rawSender
	n.in(b, n.a, func() { s = newRawSender(slog.New(slog.DiscardHandler)) })
	b.Cleanup(s.close)
	ips := make([]netip.Addr, 64)
	for i := range ips {
		ips[i] = netip.AddrFrom4([4]byte{198, 18, 7, byte(i + 1)})
	}
	for len(claims) == 0 { // until the watch listens
		_, _ = s.send(vethIface, ips...)
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	for len(claims) > 0 {
		<-claims
	}
	began := threadCPU(b, int(tid.Load()))
	for b.Loop() {
		_, _ = s.send(vethIface, ips...)
		for range 2 * len(ips) {
			<-claims
		}
	}
	b.ReportMetric(float64(threadCPU(b, int(tid.Load()))-began)/float64(b.N*2*len(ips)), "watch-cpu-ns/frame")
}

func threadCPU(b *testing.B, tid int) time.Duration {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/stat", tid))
	if err != nil {
		b.Fatal(err)
	}
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	var ticks int64
	for _, v := range f[11:13] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			b.Fatal(err)
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}
