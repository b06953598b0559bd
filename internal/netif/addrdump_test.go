package netif

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
	"gotest.tools/v3/assert"
)

// The dumper reads what netlink.Handle.AddrList and toIfAddr read, per
// interface and family, with the kernel's strict checking and without:
// primaries and secondaries, addresses with a peer, host and link-local
// addresses, on a device with many host addresses and on one without any.
func TestAddrDumperAgreesWithAddrList(t *testing.T) {
	n, tun, a := tunHolding(t, 300)
	n.ip(t, n.a, "link", "add", "empty0", "type", "veth", "peer", "name", "empty1")
	for _, args := range [][]string{
		{"198.19.0.1/24", "dev", vethIface},
		{"198.19.0.2/24", "dev", vethIface}, // secondary
		{"198.19.1.1", "peer", "198.19.1.2/32", "dev", vethIface},
		{"2001:db8::1/64", "dev", vethIface, "nodad"},
		{"2001:db8:1::1", "peer", "2001:db8:1::2/128", "dev", vethIface, "nodad"},
		{"198.19.2.1/24", "dev", tun.Name()},
	} {
		n.ip(t, n.a, append([]string{"addr", "add"}, args...)...)
	}
	var h *netlink.Handle
	n.in(t, n.a, func() {
		var err error
		h, err = netlink.NewHandle(unix.NETLINK_ROUTE)
		assert.NilError(t, err)
	})
	defer h.Close()
	links, err := h.LinkList()
	assert.NilError(t, err)

	compare := func(t *testing.T) {
		for _, l := range append(links, nil) { // nil: every link
			index := 0
			if l != nil {
				index = l.Attrs().Index
			}
			for _, fam := range []int{netlink.FAMILY_ALL, netlink.FAMILY_V4, netlink.FAMILY_V6} {
				listed, err := h.AddrList(l, fam)
				assert.NilError(t, err)
				var want []ifAddr
				for _, ad := range listed {
					if ia, ok := toIfAddr(ad); ok {
						want = append(want, ia)
					}
				}
				var got []ifAddr
				assert.NilError(t, a.dumper.list(index, fam, func(addrs []ifAddr) { got = slices.Clone(addrs) }))
				assert.DeepEqual(t, got, want, cmp.AllowUnexported(ifAddr{}), cmpPrefix(), cmpopts.EquateEmpty())
			}
		}
	}
	t.Run("strict", func(t *testing.T) {
		assert.Assert(t, a.dumper.strict, "this kernel has no strict checking of netlink requests")
		compare(t)
	})
	t.Run("not strict", func(t *testing.T) {
		assert.NilError(t, unix.SetsockoptInt(a.dumper.fd, unix.SOL_NETLINK, unix.NETLINK_GET_STRICT_CHK, 0))
		a.dumper.strict = false
		compare(t)
	})
}

// With eipd's device holding many host addresses, listing an interface
// lists that interface's addresses only, and the interface of an IP is
// still the one whose subnet contains it; a subnet added on the device by
// hand counts once a listing of the device (the agent's resync) saw it.
func TestIfaceForWithManyAddressesOnTheTun(t *testing.T) {
	n, tun, a := tunHolding(t, 1000)
	n.ip(t, n.a, "addr", "add", "198.19.0.1/24", "dev", vethIface)
	n.ip(t, n.a, "addr", "add", "2001:db8::1/64", "dev", vethIface, "nodad")
	n.ip(t, n.a, "link", "add", "other0", "type", "veth", "peer", "name", "other1")
	n.ip(t, n.a, "addr", "add", "198.19.1.1/24", "dev", "other0")

	onVeth, err := a.List(vethIface)
	assert.NilError(t, err)
	assert.DeepEqual(t, onVeth, []netip.Prefix{netip.MustParsePrefix("198.19.0.1/24"), netip.MustParsePrefix("2001:db8::1/64")}, cmpPrefix())
	onTun, err := a.List(tun.Name())
	assert.NilError(t, err)
	assert.Equal(t, len(onTun), 1000)
	assert.Assert(t, !slices.ContainsFunc(onTun, func(p netip.Prefix) bool { return !p.IsSingleIP() }), "%v", onTun)

	want := map[string]string{
		"198.19.0.7":   vethIface,
		"2001:db8::7":  vethIface,
		"198.19.1.7":   "other0",
		"198.18.0.5":   "", // bound on the device as a host address: no subnet
		"198.19.200.7": "",
	}
	check := func() {
		t.Helper()
		for ip, iface := range want {
			got, err := a.IfaceFor(netip.MustParseAddr(ip))
			if iface == "" {
				assert.ErrorContains(t, err, "no connected subnet", ip)
				continue
			}
			assert.NilError(t, err, ip)
			assert.Equal(t, got, iface, ip)
		}
	}
	check()

	n.ip(t, n.a, "addr", "add", "198.19.200.1/24", "dev", tun.Name())
	_, err = a.List(tun.Name())
	assert.NilError(t, err)
	forgetSubnets(a) // rather than wait for subnetsTTL
	want["198.19.200.7"] = tun.Name()
	check()

	// A link's name is trusted as long as the subnets listed with it.
	n.ip(t, n.a, "link", "set", "other0", "name", "other2")
	check()
	forgetSubnets(a)
	want["198.19.1.7"] = "other2"
	check()
}

// forgetSubnets drops the subnets IfaceFor listed, as subnetsTTL would.
func forgetSubnets(a *Addresses) {
	a.subnetsMu.Lock()
	defer a.subnetsMu.Unlock()
	a.subnets = nil
}

// A dump left half read, as one whose reads timed out leaves it, makes
// the kernel refuse the next dump on that socket: the listing after it
// is refused at most once, and the one after that has every address.
func TestAddrDumperAfterADumpLeftHalfRead(t *testing.T) {
	_, tun, a := tunHolding(t, 1000) // more than one datagram
	link, err := a.lookupLink(tun.Name())
	assert.NilError(t, err)
	index := link.Attrs().Index
	req := nl.NewNetlinkRequest(unix.RTM_GETADDR, unix.NLM_F_DUMP)
	req.AddData(nl.NewIfAddrmsg(netlink.FAMILY_ALL))
	_, err = unix.Write(a.dumper.fd, req.Serialize())
	assert.NilError(t, err)

	count := func() (int, error) {
		n := 0
		err := a.dumper.list(index, netlink.FAMILY_ALL, func(addrs []ifAddr) { n = len(addrs) })
		return n, err
	}
	if n, err := count(); err == nil {
		assert.Equal(t, n, 1000)
	}
	n, err := count()
	assert.NilError(t, err)
	assert.Equal(t, n, 1000)
}
