package netif

import (
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"testing"

	"gotest.tools/v3/assert"
)

// openTun opens eipd's device in n.a, and the Addresses that bind on it
// (logging to log).
func openTun(t testing.TB, n *testNet, log *slog.Logger) (*Tun, *Addresses) {
	t.Helper()
	var tun *Tun
	var a *Addresses
	n.in(t, n.a, func() {
		var err error
		tun, err = OpenTun(testLogger(t))
		assert.NilError(t, err)
		a = NewAddresses(log)
	})
	return tun, a
}

// An IPv4 address on the Tun is answered on the LAN interface (ARP and
// ping from the peer, with the interface's MAC) while arp_ignore is 0,
// and not once it is 1; the Tun makes no route of its own; deleting it
// by hand is repaired by Ensure; closing it removes it with its
// addresses.
func TestTunAddressesAnsweredOnTheLAN(t *testing.T) {
	n := newTestNet(t)
	n.ip(t, n.a, "addr", "add", "198.18.0.1/24", "dev", vethIface)
	n.ip(t, n.b, "addr", "add", "198.18.0.2/24", "dev", vethIface)
	p := netip.MustParsePrefix("198.18.0.100/32")
	tun, a := openTun(t, n, testLogger(t))
	n.in(t, n.a, func() {
		answers, err := a.AnswersARP(vethIface)
		assert.NilError(t, err)
		assert.Assert(t, answers)
	})
	defer a.Close()
	assert.Equal(t, tun.Name(), "eipd0")
	assert.NilError(t, a.Add(tun.Name(), p, 0))
	shown := n.addr(t, n.a, tun.Name(), "198.18.0.100")
	assert.Equal(t, len(shown), 1)
	assert.Equal(t, shown[0].PrefixLen, 32)
	assert.Equal(t, shown[0].ValidLft, uint32(foreverLifetime))
	routes := n.ip(t, n.a, "route", "show", "dev", tun.Name()) + n.ip(t, n.a, "-6", "route", "show", "dev", tun.Name())
	assert.Equal(t, strings.TrimSpace(routes), "", "routes through the tun")

	run(t, "ip", "netns", "exec", n.b, "ping", "-c1", "-W2", "198.18.0.100")
	mac, _ := n.neigh(t, n.b, "198.18.0.100")
	assert.Equal(t, mac, n.mac(t, n.a).String())

	n.sysctl(t, n.a, "net.ipv4.conf.all.arp_ignore=1")
	answers, err := a.AnswersARP(vethIface)
	assert.NilError(t, err)
	assert.Assert(t, !answers)
	n.sysctl(t, n.a, "net.ipv4.conf.all.arp_ignore=0")

	n.ip(t, n.a, "link", "del", tun.Name())
	again, err := tun.Ensure()
	assert.NilError(t, err)
	assert.Assert(t, again)
	again, err = tun.Ensure()
	assert.NilError(t, err)
	assert.Assert(t, !again)
	assert.NilError(t, a.Add(tun.Name(), p, 0))
	n.ip(t, n.a, "link", "set", tun.Name(), "down")
	again, err = tun.Ensure()
	assert.NilError(t, err)
	assert.Assert(t, again)
	assert.Assert(t, strings.Contains(n.ip(t, n.a, "link", "show", tun.Name()), ",UP"))

	assert.NilError(t, tun.Close())
	assert.Assert(t, !strings.Contains(n.ip(t, n.a, "link", "show"), "eipd0"), "the tun outlived its file")
}

// Unbinding many host addresses from the Tun leaves none behind, one
// request each; an address bound there with another length by hand is
// removed too once Del knows of it.
func TestTunDelManyHostAddresses(t *testing.T) {
	n := newTestNet(t)
	tun, a := openTun(t, n, slog.New(slog.DiscardHandler))
	defer a.Close()
	defer tun.Close()
	var ps []netip.Prefix
	for i := range 300 {
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, 1 + byte(i/250), byte(1 + i%250)}), 32)
		assert.NilError(t, a.Add(tun.Name(), p, 0))
		ps = append(ps, p)
	}
	for _, p := range ps {
		assert.NilError(t, a.Del(tun.Name(), p))
	}
	got, err := a.List(tun.Name())
	assert.NilError(t, err)
	assert.Equal(t, len(got), 0, "left behind: %v", got)

	p := netip.MustParsePrefix("198.18.9.1/32")
	assert.NilError(t, a.Add(tun.Name(), p, 0))
	n.ip(t, n.a, "addr", "add", "198.18.9.1/24", "dev", tun.Name())
	_, err = a.List(tun.Name()) // what the agent's resync does
	assert.NilError(t, err)
	assert.NilError(t, a.Del(tun.Name(), p))
	assert.Equal(t, len(n.addr(t, n.a, tun.Name(), "198.18.9.1")), 0)
}

// tunHolding opens eipd's device in a new test net, in n.a, and binds
// count IPv4 host addresses on it, as the agent binds the IPs it holds.
// The test's cleanup closes both.
func tunHolding(t testing.TB, count int) (*testNet, *Tun, *Addresses) {
	t.Helper()
	n := newTestNet(t)
	tun, a := openTun(t, n, slog.New(slog.DiscardHandler))
	t.Cleanup(func() {
		a.Close()
		_ = tun.Close()
	})
	for i := range count {
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(i / 250), byte(1 + i%250)}), 32)
		assert.NilError(t, a.Add(tun.Name(), p, 0))
	}
	return n, tun, a
}

// BenchmarkResyncListings is what the agent's resync asks of the adapter
// at 10,000 IPs on 3 nodes: a listing of eipd's device, which holds a
// node's 3,334 host addresses, and of the LAN interface, and the
// interface of an IP not resolved before, with the subnets listed afresh
// and as listed (a cold start resolves thousands within subnetsTTL).
func BenchmarkResyncListings(b *testing.B) {
	n, tun, a := tunHolding(b, 3334)
	n.ip(b, n.a, "addr", "add", "198.19.0.1/24", "dev", vethIface)
	b.Run("list device", func(b *testing.B) {
		for b.Loop() {
			_, err := a.List(tun.Name())
			assert.NilError(b, err)
		}
	})
	b.Run("list LAN interface", func(b *testing.B) {
		for b.Loop() {
			_, err := a.List(vethIface)
			assert.NilError(b, err)
		}
	})
	b.Run("iface for", func(b *testing.B) {
		for b.Loop() {
			forgetSubnets(a)
			iface, err := a.IfaceFor(netip.MustParseAddr("198.19.0.7"))
			assert.NilError(b, err)
			assert.Equal(b, iface, vethIface)
		}
	})
	b.Run("iface for, subnets listed", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			iface, err := a.IfaceFor(netip.MustParseAddr("198.19.0.7"))
			assert.NilError(b, err)
			assert.Equal(b, iface, vethIface)
		}
	})
}

// Tuns open their devices as they are asked for, in the namespace of the
// first whichever thread asks; each is eipd's, and repaired on its own;
// closing them removes them all.
func TestTunsOpenInTheirNamespace(t *testing.T) {
	n := newTestNet(t)
	var tuns *Tuns
	n.in(t, n.a, func() {
		var err error
		tuns, err = OpenTuns(testLogger(t))
		assert.NilError(t, err)
	})
	first, err := tuns.Name(0)
	assert.NilError(t, err)
	assert.Equal(t, first, "eipd0")
	third, err := tuns.Name(2) // outside n.in: still in n.a
	assert.NilError(t, err)
	assert.Equal(t, third, "eipd2")
	links := n.ip(t, n.a, "-o", "link", "show")
	for _, name := range []string{"eipd0", "eipd1", "eipd2"} {
		assert.Assert(t, strings.Contains(links, name+":"), "%s missing: %s", name, links)
		assert.Assert(t, tuns.Owns(name))
	}
	assert.Assert(t, !tuns.Owns(vethIface))
	_, err = tuns.Ensure(vethIface)
	assert.ErrorContains(t, err, "not one of eipd's devices")

	n.ip(t, n.a, "link", "del", "eipd1")
	again, err := tuns.Ensure("eipd1")
	assert.NilError(t, err)
	assert.Assert(t, again)
	again, err = tuns.Ensure("eipd0")
	assert.NilError(t, err)
	assert.Assert(t, !again)

	assert.NilError(t, tuns.Close())
	assert.Assert(t, !strings.Contains(n.ip(t, n.a, "link", "show"), "eipd"), "a tun outlived its file")
}

// BenchmarkAddAmongMany binds and unbinds one host address on a device
// that holds n others, as eipd does with 256 on each of its devices
// (netif.Tuns) and did with every address on one: the kernel walks the
// device's list of addresses on each add and each removal.
func BenchmarkAddAmongMany(b *testing.B) {
	for _, n := range []int{256, 5000} {
		b.Run(fmt.Sprintf("%d on the device", n), func(b *testing.B) {
			_, tun, a := tunHolding(b, n)
			p := netip.MustParsePrefix("198.19.255.1/32")
			for b.Loop() {
				assert.NilError(b, a.Add(tun.Name(), p, 0))
				assert.NilError(b, a.Del(tun.Name(), p))
			}
		})
	}
}
