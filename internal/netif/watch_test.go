package netif

import (
	"cmp"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"gotest.tools/v3/assert"
)

func upAttrs(index int, name string) *netlink.LinkAttrs {
	return &netlink.LinkAttrs{Index: index, Name: name, Flags: net.FlagUp, RawFlags: unix.IFF_UP | unix.IFF_LOWER_UP, OperState: netlink.OperUp}
}

func downAttrs(index int, name string) *netlink.LinkAttrs {
	return &netlink.LinkAttrs{Index: index, Name: name, Flags: net.FlagUp, RawFlags: unix.IFF_UP, OperState: netlink.OperLowerLayerDown}
}

func TestApplyLink(t *testing.T) {
	known := map[int]linkState{}
	steps := []struct {
		name    string
		deleted bool
		attrs   *netlink.LinkAttrs
		want    []LinkEvent
	}{
		{"new link, down", false, downAttrs(2, "eth0"), []LinkEvent{{"eth0", false}}},
		{"same state again (MTU change etc.)", false, downAttrs(2, "eth0"), nil},
		{"carrier", false, upAttrs(2, "eth0"), []LinkEvent{{"eth0", true}}},
		{"refresh while up", false, upAttrs(2, "eth0"), nil},
		{"renamed while up", false, upAttrs(2, "lan0"), []LinkEvent{{"eth0", false}, {"lan0", true}}},
		{"carrier lost", false, downAttrs(2, "lan0"), []LinkEvent{{"lan0", false}}},
		{"deleted while down", true, downAttrs(2, "lan0"), nil},
		{"new link, up", false, upAttrs(3, "eth1"), []LinkEvent{{"eth1", true}}},
		{"deleted while up", true, upAttrs(3, "eth1"), []LinkEvent{{"eth1", false}}},
		{"unknown link deleted", true, upAttrs(4, "eth2"), nil},
	}
	for _, s := range steps {
		got := applyLink(known, s.deleted, s.attrs)
		assert.DeepEqual(t, got, s.want)
	}
	assert.Equal(t, len(known), 0)
}

func TestDiffLinks(t *testing.T) {
	before := map[int]linkState{
		1: {"lo", true},
		2: {"eth0", true},
		3: {"eth1", false},
		4: {"eth2", true},
		5: {"old", true},
	}
	after := map[int]linkState{
		1: {"lo", true},
		2: {"eth0", false}, // lost carrier
		3: {"eth1", true},  // gained it
		// 4 deleted
		5: {"new", true}, // renamed
		6: {"eth3", false},
	}
	got := diffLinks(before, after)
	slices.SortFunc(got, func(a, b LinkEvent) int { return cmp.Compare(a.Iface+fmtBool(a.Up), b.Iface+fmtBool(b.Up)) })
	assert.DeepEqual(t, got, []LinkEvent{
		{"eth0", false}, {"eth1", true}, {"eth2", false}, {"eth3", false}, {"new", true}, {"old", false},
	})
	assert.Equal(t, len(diffLinks(after, after)), 0)
}

func TestDiffAddrs(t *testing.T) {
	p := netip.MustParsePrefix
	before := map[addrKey]string{
		{2, p("198.18.0.1/24")}:   "eth0",
		{2, p("198.18.0.5/32")}:   "eth0",
		{3, p("2001:db8::5/128")}: "eth1",
	}
	after := map[addrKey]string{
		{2, p("198.18.0.1/24")}:   "eth0",
		{2, p("198.18.0.5/24")}:   "eth0", // same address, new length: one gone, one new
		{3, p("2001:db8::6/128")}: "eth1",
	}
	got := diffAddrs(before, after)
	slices.SortFunc(got, func(a, b AddrEvent) int {
		return cmp.Compare(a.Prefix.String()+fmtBool(a.Added), b.Prefix.String()+fmtBool(b.Added))
	})
	assert.DeepEqual(t, got, []AddrEvent{
		{"eth0", p("198.18.0.5/24"), true},
		{"eth0", p("198.18.0.5/32"), false},
		{"eth1", p("2001:db8::5/128"), false},
		{"eth1", p("2001:db8::6/128"), true},
	}, cmpPrefix())
	assert.Equal(t, len(diffAddrs(nil, nil)), 0)
}

func TestApplyAddr(t *testing.T) {
	w := &watcher{
		log:   slog.New(slog.DiscardHandler),
		links: map[int]linkState{2: {"eth0", true}},
		addrs: map[addrKey]string{},
	}
	update := func(prefix string, added bool, scope int) netlink.AddrUpdate {
		p := netip.MustParsePrefix(prefix)
		return netlink.AddrUpdate{LinkAddress: *ipNet(p), LinkIndex: 2, NewAddr: added, Scope: scope}
	}
	vip := netip.MustParsePrefix("198.18.0.5/32")
	steps := []struct {
		name   string
		update netlink.AddrUpdate
		want   *AddrEvent
	}{
		{"added", update("198.18.0.5/32", true, unix.RT_SCOPE_UNIVERSE), &AddrEvent{"eth0", vip, true}},
		{"lifetime refreshed", update("198.18.0.5/32", true, unix.RT_SCOPE_UNIVERSE), nil},
		{"link-local ignored", update("fe80::1/64", true, unix.RT_SCOPE_LINK), nil},
		{"removed", update("198.18.0.5/32", false, unix.RT_SCOPE_UNIVERSE), &AddrEvent{"eth0", vip, false}},
		{"removal repeated", update("198.18.0.5/32", false, unix.RT_SCOPE_UNIVERSE), nil},
	}
	for _, s := range steps {
		ev, ok := w.applyAddr(s.update)
		if s.want == nil {
			assert.Assert(t, !ok, "%s: unexpected %+v", s.name, ev)
			continue
		}
		assert.Assert(t, ok, s.name)
		assert.DeepEqual(t, ev, *s.want, cmpPrefix())
	}
}

func TestRenameAddrs(t *testing.T) {
	p := netip.MustParsePrefix
	addrs := map[addrKey]string{{2, p("198.18.0.5/32")}: "eth0", {3, p("198.18.0.6/32")}: "eth1"}
	renameAddrs(addrs, 2, "lan0")
	assert.DeepEqual(t, addrs, map[addrKey]string{{2, p("198.18.0.5/32")}: "lan0", {3, p("198.18.0.6/32")}: "eth1"}, cmpPrefix())
}

func fmtBool(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
