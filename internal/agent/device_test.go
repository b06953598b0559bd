package agent

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp/cmpopts"
	"gotest.tools/v3/assert"

	"github.com/eip-project/eip/internal/config"
	"github.com/eip-project/eip/internal/netif"
)

func TestPlaceOnDevice(t *testing.T) {
	v4, v6 := netip.MustParseAddr("198.18.100.1"), netip.MustParseAddr("2001:db8::1")
	for _, c := range []struct {
		name     string
		p        netip.Prefix
		announce config.Announce
		arp      bool
		want     bool
	}{
		{"IPv4 host address, arp_ignore 0", netip.PrefixFrom(v4, 32), config.AnnounceARP, true, true},
		{"IPv4, arp_ignore 1", netip.PrefixFrom(v4, 32), config.AnnounceARP, false, false},
		{"IPv4 with a netmask", netip.PrefixFrom(v4, 24), config.AnnounceARP, true, false},
		{"IPv6 answers NS only on the interface", netip.PrefixFrom(v6, 128), config.AnnounceARP, true, false},
		{"ARP and BGP, arp_ignore 0", netip.PrefixFrom(v4, 32), config.AnnounceBoth, true, true},
		{"ARP and BGP, arp_ignore 1", netip.PrefixFrom(v4, 32), config.AnnounceBoth, false, false},
		{"BGP alone, IPv4", netip.PrefixFrom(v4, 32), config.AnnounceBGP, false, true},
		{"BGP alone, IPv6", netip.PrefixFrom(v6, 128), config.AnnounceBGP, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, placeOnDevice(c.p, c.announce, c.arp), c.want)
		})
	}
}

// An IPv4 address goes on eipd's device, with no lifetime and nothing to
// refresh; with arp_ignore set it goes on the interface and is refreshed.
func TestLoopBindsOnTheDeviceUnlessARPIsIgnored(t *testing.T) {
	for _, ignored := range []bool{false, true} {
		w, ip, _ := loneNodeBinds(t, ignored)
		want, refreshed := testDev, 0
		if ignored {
			want, refreshed = testIface, 1
		}
		assert.Equal(t, w.addrs[netip.PrefixFrom(ip, 32)], want)
		assert.Equal(t, len(w.s.lifetime.addrs), refreshed)
	}
}

// arp_ignore changing while eipd runs moves the addresses at the next
// resync.
func TestLoopMovesAddressesWhenARPIgnoreChanges(t *testing.T) {
	w, ip, _ := loneNodeBinds(t, false)
	p := netip.PrefixFrom(ip, 32)
	assert.Equal(t, w.addrs[p], testDev)
	w.take()
	w.arpIgnored = true
	w.s.resync(false)
	w.pass()
	assert.DeepEqual(t, w.take(), []string{"unbind 198.18.100.1", "bind 198.18.100.1"})
	assert.Equal(t, w.addrs[p], testIface)
}

// Someone deletes eipd's device by hand: it is created again, and the
// addresses it had are bound again and counted as vanished.
func TestLoopRestoresADeletedDevice(t *testing.T) {
	w, ip, m := loneNodeBinds(t, false)
	w.take()
	// The address removal may come before the link's, and its restore
	// fails: the device is not back yet.
	p := netip.PrefixFrom(ip, 32)
	delete(w.addrs, p)
	w.failAdd = true
	w.s.addrEvent(netif.AddrEvent{Iface: testDev, Prefix: p})
	w.failAdd = false
	w.deviceGone = testDev
	w.s.linkEvent(netif.LinkEvent{Iface: testDev, Up: false})
	assert.DeepEqual(t, w.take(), []string{"bind 198.18.100.1"})
	assert.Equal(t, w.addrs[p], testDev)
	assert.Equal(t, m.vanished, 1)

	// Or it comes after: counted once all the same.
	delete(w.addrs, p)
	w.deviceGone = testDev
	w.s.linkEvent(netif.LinkEvent{Iface: testDev, Up: false})
	w.s.addrEvent(netif.AddrEvent{Iface: testDev, Prefix: p})
	assert.DeepEqual(t, w.take(), []string{"bind 198.18.100.1"})
	assert.Equal(t, m.vanished, 2)
	assert.Equal(t, len(w.s.binder.linkDown), 0, "the device is not a LAN link")
}

// The resync finds what no address event told: an address of this node's
// that is gone is bound again and counted as vanished, one in its ranges
// that it does not hold is removed, and its own address bound with another
// length counts as there.
func TestLoopResyncFindsWhatNoEventTold(t *testing.T) {
	w, ip, m := loneNodeBinds(t, false)
	w.take()
	p := netip.PrefixFrom(ip, 32)
	w.s.resync(false)
	assert.Equal(t, len(w.take()), 0, "a resync that found everything in place acted")

	delete(w.addrs, p)
	w.s.resync(false)
	assert.DeepEqual(t, w.take(), []string{"bind 198.18.100.1"})
	assert.Equal(t, w.addrs[p], testDev)
	assert.Equal(t, m.vanished, 1)

	stray := netip.PrefixFrom(testIP(5), 32)
	w.addrs[stray] = testDev
	w.s.resync(false)
	assert.DeepEqual(t, w.take(), []string{"unbind " + testIP(5).String()})

	delete(w.addrs, p)
	w.addrs[netip.PrefixFrom(ip, 24)] = testDev
	w.s.resync(false)
	assert.Equal(t, len(w.take()), 0)
	assert.Equal(t, m.vanished, 1)
}

type countingMetrics struct {
	nopMetrics
	vanished int
}

func (m *countingMetrics) Vanished() { m.vanished++ }

// The watchdog fires once, loopHungAfter after the loop's last progress,
// and never before the first or after a shutdown disarmed it.
func TestWatchdog(t *testing.T) {
	var fired []time.Duration
	w := newWatchdog(nil, func(q time.Duration) { fired = append(fired, q) })
	w.check(t0.Add(time.Hour))
	assert.Equal(t, len(fired), 0, "fired before the first tick")
	w.progressed(t0)
	w.check(t0.Add(loopHungAfter - time.Millisecond))
	assert.Equal(t, len(fired), 0)
	w.check(t0.Add(loopHungAfter))
	w.check(t0.Add(2 * loopHungAfter))
	assert.DeepEqual(t, fired, []time.Duration{loopHungAfter})

	fired = nil
	w = newWatchdog(nil, func(q time.Duration) { fired = append(fired, q) })
	w.progressed(t0)
	w.disarm()
	w.check(t0.Add(time.Hour))
	assert.Equal(t, len(fired), 0, "fired during a shutdown")
}

// A loop that keeps binding or unbinding is not hung, however long since
// its last tick.
func TestLoopUnbindingIsProgress(t *testing.T) {
	w, ip, _ := loneNodeBinds(t, false)
	w.step(loopHungAfter)
	w.s.unbind(ip, "test")
	w.s.watch.check(w.clk.Now())
	assert.Equal(t, w.hung, time.Duration(0), "a loop that just unbound was called hung")
	w.s.watch.check(w.clk.Now().Add(loopHungAfter))
	assert.Equal(t, w.hung, loopHungAfter)
}

// An unbind's own removal event, read after the IP was bound again (a
// busy loop reads its events late), is no vanished address; a removal
// after that one is.
func TestLoopOwnLateRemovalIsNotVanished(t *testing.T) {
	w, ip, m := loneNodeBinds(t, false)
	p := netip.PrefixFrom(ip, 32)
	e := w.s.desired.entries[ip]
	w.s.unbind(ip, "test")
	w.s.bind(ip, e, nil, "test")
	w.take()
	w.s.addrEvent(netif.AddrEvent{Iface: testDev, Prefix: p})
	assert.Equal(t, m.vanished, 0)
	assert.Equal(t, w.addrs[p], testDev)
	delete(w.addrs, p)
	w.s.addrEvent(netif.AddrEvent{Iface: testDev, Prefix: p})
	assert.Equal(t, m.vanished, 1)
	assert.DeepEqual(t, w.take(), []string{"bind 198.18.100.1"})
}

// loneNodeBinds is node-a alone, having bound one IP (on the interface
// when arpIgnored), its metrics counted.
func loneNodeBinds(t *testing.T, arpIgnored bool) (*world, netip.Addr, *countingMetrics) {
	w := newWorld(t, "node-a", defaultTestConfig())
	m := &countingMetrics{}
	w.a.opt.Metrics, w.s.metrics, w.s.self.metrics = m, m, m // the loop and its parts are given their Metrics when built
	w.arpIgnored = arpIgnored
	ip := testIP(0)
	w.addService("web", ip)
	w.pass()
	for range 4 {
		w.tick()
	}
	return w, ip, m
}

// Addresses are spread over eipd's devices, perDevice on each, the
// lowest-numbered with room first; a device deleted by hand gets back
// its own addresses and no others.
func TestLoopSpreadsAddressesOverDevices(t *testing.T) {
	w := newWorld(t, "node-a", defaultTestConfig())
	var ips []netip.Addr
	for i := range perDevice + 2 {
		ips = append(ips, testIP(i))
		w.addService(fmt.Sprintf("web-%d", i), testIP(i))
	}
	w.pass()
	for range 4 {
		w.tick()
	}
	perDev := func() map[string]int {
		n := map[string]int{}
		for _, dev := range w.addrs {
			n[dev]++
		}
		return n
	}
	assert.DeepEqual(t, perDev(), map[string]int{"eipd0": perDevice, "eipd1": 2})

	// One address leaves eipd0; the next bound fills its place.
	gone := w.addrs[netip.PrefixFrom(ips[0], 32)]
	w.deleteService("web-0")
	w.s.sched.dirtySvc = true
	w.tick()
	w.addService("web-new", testIP(perDevice+2))
	for range 4 {
		w.tick()
	}
	assert.Equal(t, w.addrs[netip.PrefixFrom(testIP(perDevice+2), 32)], gone)
	assert.DeepEqual(t, perDev(), map[string]int{"eipd0": perDevice, "eipd1": 2})

	w.take()
	for p, dev := range w.addrs {
		if dev == "eipd1" {
			delete(w.addrs, p)
		}
	}
	w.deviceGone = "eipd1"
	w.s.linkEvent(netif.LinkEvent{Iface: "eipd1", Up: false})
	assert.DeepEqual(t, w.take(), []string{"bind " + ips[perDevice].String(), "bind " + ips[perDevice+1].String()}, cmpopts.SortSlices(func(a, b string) bool { return a < b }))
	assert.DeepEqual(t, perDev(), map[string]int{"eipd0": perDevice, "eipd1": 2})
}
