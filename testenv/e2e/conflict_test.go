package e2e

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/eip-project/eip/internal/cli"
	"github.com/eip-project/eip/testenv"
)

// A Service names an address that another LAN host already uses (issue
// 14, (a)): eip probes before binding it, never binds it, says why in a
// Warning event naming the host's MAC, and only the host answers for it
// throughout; once the host drops the address, eip binds it within a few
// seconds. The control-plane namespace plays the LAN host.
func TestAddressInUseOnTheLANIsNotBound(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	ip := testenv.ServiceIP(172)
	hostAddr := ip.String() + "/16"
	_, err := e.c.Exec(e.ctx, testenv.ControlPlane, "ip", "addr", "add", hostAddr, "dev", "eth0")
	e.must(err)
	dropped := false
	t.Cleanup(func() {
		if !dropped {
			_, _ = e.c.Exec(e.ctx, testenv.ControlPlane, "ip", "addr", "del", hostAddr, "dev", "eth0")
		}
	})
	macs, err := e.c.WhoAnswers(ip)
	e.must(err)
	assert.Equal(t, len(macs), 1, "the LAN host answers for %s: %v", ip, macs)
	hostMAC := macs[0]

	// The host's own traffic: the client pings it at the address
	// throughout, and only the host answers.
	traffic := e.probe(ip)
	created := time.Now()
	e.service("inuse", ip)
	msg := e.warningSince("Service", "inuse", "AddressConflict", created, ip.String(), hostMAC.String())
	t.Logf("event: %s", msg)
	e.eventually("kubectl eip status says conflict with the host's MAC", func() (bool, string) {
		for _, r := range e.statusJSON().IPs {
			if r.IP == ip.String() {
				return r.State == cli.StateConflict && r.ConflictMAC == hostMAC.String(), fmt.Sprintf("%s %q %s", r.State, r.ConflictMAC, r.Reason)
			}
		}
		return false, "no row"
	})
	e.statusShows(hostMAC.String())
	e.throughout(ip.String()+" answered by the LAN host alone", 2*leaseDuration, func() string {
		if on := e.boundOn(ip); len(on) > 0 {
			return fmt.Sprintf("bound on %v", on)
		}
		macs, err := e.c.WhoAnswers(ip)
		if err != nil {
			return err.Error()
		}
		if len(macs) != 1 || !bytes.Equal(macs[0], hostMAC) {
			return fmt.Sprintf("answered by %v", macs)
		}
		return ""
	})
	r := traffic.Stop()
	e.noTwoMACs(r)
	assert.DeepEqual(t, r.MACs(), []net.HardwareAddr{hostMAC})
	assert.Assert(t, r.Lost()*50 <= r.Sent, "the host's traffic was disturbed: %d of %d pings lost", r.Lost(), r.Sent)

	_, err = e.c.Exec(e.ctx, testenv.ControlPlane, "ip", "addr", "del", hostAddr, "dev", "eth0")
	e.must(err)
	dropped = true
	freed := time.Now()
	holder := e.served(ip)
	t.Logf("bound on %s %s after the host dropped it", holder, time.Since(freed).Round(time.Millisecond))
	e.warningSince("Service", "inuse", "AddressConflict", created, hostMAC.String()) // still on record
}

// A machine that is not an eip node announces an address eip serves
// (issue 14, (e)): a gratuitous ARP from the control-plane namespace, whose
// MAC no eip node publishes. The holder records AddressClaimed naming the
// MAC, status shows it, and, as documented, the holder keeps the address
// and the lock and defends it once (RFC 5227 §2.4 (b)): one announcement,
// a gratuitous ARP request and reply, answers the stranger's three GARPs,
// so there is no ping-pong.
func TestForeignGARPForAHeldIP(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	ip := testenv.ServiceIP(173)
	e.service("claimed", ip)
	holder := e.served(ip)
	strangerMAC, err := e.c.NodeMAC(testenv.ControlPlane)
	e.must(err)
	// The holder announces a bound IP for 2 s; wait that out.
	e.eventually("the holder's announcements are over", func() (bool, string) {
		l, err := e.c.ListenAnnouncements(testenv.Client, ip)
		e.must(err)
		n, err := l.Count(time.Second)
		e.must(err)
		return len(n) == 0, fmt.Sprint(n)
	})

	const garps = 3
	since := time.Now()
	l, err := e.c.ListenAnnouncements(testenv.Client, ip)
	e.must(err)
	counted := make(chan map[string]int, 1)
	go func() {
		n, err := l.Count(5 * time.Second)
		if err != nil {
			t.Error(err)
		}
		counted <- n
	}()
	e.must(e.c.SendGARP(e.ctx, testenv.ControlPlane, ip, garps, 300*time.Millisecond))
	msg := e.warningSince("Service", "claimed", "AddressClaimed", since, ip.String(), strangerMAC.String())
	t.Logf("event: %s", msg)
	e.eventually("kubectl eip status shows the claim", func() (bool, string) {
		for _, r := range e.statusJSON().IPs {
			if r.IP == ip.String() {
				return r.State == cli.StateBound && r.ClaimedBy == strangerMAC.String(), fmt.Sprintf("%s %q", r.State, r.ClaimedBy)
			}
		}
		return false, "no row"
	})
	n := <-counted
	t.Logf("announcements of %s on the wire: %v", ip, n)
	assert.DeepEqual(t, n, map[string]int{strangerMAC.String(): garps, e.mac(holder).String(): 2})
	assert.DeepEqual(t, e.boundOn(ip), []string{holder})
	assert.Equal(t, e.holder(ip), holder)
}

// Auto-assignment skips addresses in use (issue 14, (c)): twenty
// LoadBalancer Services in a pool where a LAN host (the control-plane
// namespace) uses some addresses get only free ones, and the host keeps
// answering for its own.
func TestAllocationSkipsAddressesInUse(t *testing.T) {
	t.Parallel()
	e := newEnv(t, allocConfig())
	var used []netip.Addr
	for _, n := range []int{1, 2, 5, 9} {
		ip := pool.Addr().Next()
		for range n - 1 {
			ip = ip.Next()
		}
		used = append(used, ip)
		addr := ip.String() + "/16"
		_, err := e.c.Exec(e.ctx, testenv.ControlPlane, "ip", "addr", "add", addr, "dev", "eth0")
		e.must(err)
		t.Cleanup(func() { _, _ = e.c.Exec(e.ctx, testenv.ControlPlane, "ip", "addr", "del", addr, "dev", "eth0") })
	}
	hostMAC, err := e.c.NodeMAC(testenv.ControlPlane)
	e.must(err)
	const services = 20
	for i := range services {
		e.lbService(fmt.Sprintf("lb-%02d", i))
	}
	got := map[netip.Addr]string{}
	for i := range services {
		name := fmt.Sprintf("lb-%02d", i)
		ip := e.lbIPs(name, 1)[0]
		assert.Assert(t, !slices.Contains(used, ip), "%s got %s, which the LAN host uses", name, ip)
		assert.Equal(t, got[ip], "", "%s and %s both got %s", got[ip], name, ip)
		got[ip] = name
	}
	for ip := range got {
		e.served(ip)
	}
	for _, ip := range used {
		macs, err := e.c.WhoAnswers(ip)
		e.must(err)
		assert.DeepEqual(t, macs, []net.HardwareAddr{hostMAC})
	}
}
