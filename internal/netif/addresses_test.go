package netif

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"gotest.tools/v3/assert"
)

func TestLifetimeSeconds(t *testing.T) {
	for _, tc := range []struct {
		in   time.Duration
		want int
	}{
		{0, foreverLifetime},
		{time.Nanosecond, 1},
		{999 * time.Millisecond, 1},
		{time.Second, 1},
		{1999 * time.Millisecond, 1},
		{1500 * time.Millisecond, 1},
		{2 * time.Second, 2},
		{90 * time.Second, 90},
		{200 * 365 * 24 * time.Hour, foreverLifetime},
	} {
		got, err := lifetimeSeconds(tc.in)
		assert.NilError(t, err, tc.in)
		assert.Equal(t, got, tc.want, tc.in)
	}
	_, err := lifetimeSeconds(-time.Second)
	assert.ErrorContains(t, err, "negative lifetime")
}

func TestToIfAddr(t *testing.T) {
	got, ok := toIfAddr(netlink.Addr{
		IPNet:     &net.IPNet{IP: net.ParseIP("198.18.0.5"), Mask: net.CIDRMask(24, 32)},
		Flags:     unix.IFA_F_SECONDARY,
		LinkIndex: 3,
	})
	assert.Assert(t, ok)
	assert.Equal(t, got, ifAddr{link: 3, prefix: netip.MustParsePrefix("198.18.0.5/24"), global: true, secondary: true})

	got, ok = toIfAddr(netlink.Addr{
		IPNet: &net.IPNet{IP: net.ParseIP("fe80::1"), Mask: net.CIDRMask(64, 128)},
		Flags: unix.IFA_F_TEMPORARY, // same bit as secondary; IPv6 has no secondaries
		Scope: unix.RT_SCOPE_LINK,
	})
	assert.Assert(t, ok)
	assert.Equal(t, got, ifAddr{prefix: netip.MustParsePrefix("fe80::1/64")})

	_, ok = toIfAddr(netlink.Addr{})
	assert.Assert(t, !ok)
}

func TestTakesSecondaries(t *testing.T) {
	addr := func(link int, p string, secondary bool) ifAddr {
		return ifAddr{link: link, prefix: netip.MustParsePrefix(p), global: true, secondary: secondary}
	}
	primary := addr(2, "198.18.0.1/24", false)
	for _, tc := range []struct {
		name   string
		all    []ifAddr
		target ifAddr
		want   bool
	}{
		{"primary with a secondary", []ifAddr{primary, addr(2, "198.18.0.7/24", true)}, primary, true},
		{"primary alone", []ifAddr{primary}, primary, false},
		{"secondary itself", []ifAddr{primary, addr(2, "198.18.0.7/24", true)}, addr(2, "198.18.0.7/24", true), false},
		{"secondary of another subnet", []ifAddr{primary, addr(2, "198.18.1.7/24", true)}, primary, false},
		{"secondary with another mask", []ifAddr{primary, addr(2, "198.18.0.7/25", true)}, primary, false},
		{"secondary on another link", []ifAddr{primary, addr(3, "198.18.0.7/24", true)}, primary, false},
		{"host address", []ifAddr{addr(2, "198.18.0.9/32", false)}, addr(2, "198.18.0.9/32", false), false},
		{"IPv6", []ifAddr{addr(2, "2001:db8::1/64", false), addr(2, "2001:db8::2/64", true)}, addr(2, "2001:db8::1/64", false), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, takesSecondaries(tc.all, tc.target), tc.want)
		})
	}
}

func TestConnectedLink(t *testing.T) {
	addr := func(link int, p string) ifAddr {
		return ifAddr{link: link, prefix: netip.MustParsePrefix(p), global: true}
	}
	linkLocal := ifAddr{link: 9, prefix: netip.MustParsePrefix("fe80::1/64")}
	all := []ifAddr{
		addr(1, "198.18.0.0/15"),
		addr(2, "198.18.0.1/24"),
		addr(3, "198.18.0.77/32"), // a bound external IP: no subnet
		addr(4, "198.18.1.5/24"),  // an external IP bound with a mask...
		addr(5, "198.18.1.1/24"),  // ...in the subnet of this node address
		addr(7, "198.18.2.1/24"),
		addr(6, "198.18.2.2/24"), // same subnet twice: lowest index wins
		addr(2, "2001:db8::1/64"),
		linkLocal,
	}
	for _, tc := range []struct {
		ip   string
		want int
		ok   bool
	}{
		{"198.18.0.77", 2, true},
		{"198.18.0.200", 2, true},
		{"198.18.1.5", 5, true},
		{"198.18.1.9", 4, true},
		{"198.18.2.9", 6, true},
		{"198.19.0.1", 1, true},
		{"2001:db8::5", 2, true},
		{"fe80::5", 0, false},
		{"2001:db8:1::5", 0, false},
	} {
		t.Run(tc.ip, func(t *testing.T) {
			got, ok := connectedLink(all, netip.MustParseAddr(tc.ip))
			assert.Equal(t, ok, tc.ok)
			assert.Equal(t, got, tc.want)
		})
	}
}

func TestLinkUp(t *testing.T) {
	for _, tc := range []struct {
		name  string
		attrs netlink.LinkAttrs
		want  bool
	}{
		{"up with carrier", netlink.LinkAttrs{Flags: net.FlagUp, RawFlags: unix.IFF_UP | unix.IFF_LOWER_UP, OperState: netlink.OperUp}, true},
		{"driver without operstate", netlink.LinkAttrs{Flags: net.FlagUp, RawFlags: unix.IFF_UP | unix.IFF_LOWER_UP, OperState: netlink.OperUnknown}, true},
		{"no carrier", netlink.LinkAttrs{Flags: net.FlagUp, RawFlags: unix.IFF_UP, OperState: netlink.OperLowerLayerDown}, false},
		{"carrier but operstate down", netlink.LinkAttrs{Flags: net.FlagUp, RawFlags: unix.IFF_UP | unix.IFF_LOWER_UP, OperState: netlink.OperDown}, false},
		{"administratively down", netlink.LinkAttrs{RawFlags: unix.IFF_LOWER_UP, OperState: netlink.OperDown}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, linkUp(&tc.attrs), tc.want)
		})
	}
}
