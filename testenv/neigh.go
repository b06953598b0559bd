package testenv

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ndp"
	"github.com/vishvananda/netlink"
	"golang.org/x/net/ipv6"
)

// whoAnswersWindow is how long WhoAnswers collects answers. Hosts on the
// bridge answer within a millisecond.
const whoAnswersWindow = 100 * time.Millisecond

// WhoAnswers asks the LAN, from the client namespace, who has ip: an ARP
// request for IPv4, a neighbour solicitation for IPv6. It returns every
// distinct MAC that answered, in order of arrival; none when no one did.
func (c *Cluster) WhoAnswers(ip netip.Addr) ([]net.HardwareAddr, error) {
	var macs []net.HardwareAddr
	add := func(mac net.HardwareAddr) {
		for _, m := range macs {
			if bytes.Equal(m, mac) {
				return
			}
		}
		macs = append(macs, append(net.HardwareAddr(nil), mac...))
	}
	var err error
	if ip.Is4() {
		err = c.arpWhoHas(ip, add)
	} else {
		err = c.ndpWhoHas(ip, add)
	}
	if err != nil {
		return nil, fmt.Errorf("who answers %s: %w", ip, err)
	}
	return macs, nil
}

func (c *Cluster) arpWhoHas(ip netip.Addr, add func(net.HardwareAddr)) error {
	var cl *arp.Client
	if err := c.cl.ns.do(func() error {
		ifi, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		cl, err = arp.Dial(ifi)
		return err
	}); err != nil {
		return err
	}
	defer cl.Close()
	if err := cl.SetReadDeadline(time.Now().Add(whoAnswersWindow)); err != nil {
		return err
	}
	if err := cl.Request(ip); err != nil {
		return err
	}
	for {
		pkt, _, err := cl.Read()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil
		}
		if err != nil {
			return err
		}
		if pkt.Operation == arp.OperationReply && pkt.SenderIP == ip {
			add(pkt.SenderHardwareAddr)
		}
	}
}

func (c *Cluster) ndpWhoHas(ip netip.Addr, add func(net.HardwareAddr)) error {
	var conn *ndp.Conn
	var mac net.HardwareAddr
	if err := c.cl.ns.do(func() error {
		ifi, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		mac = ifi.HardwareAddr
		conn, _, err = ndp.Listen(ifi, ndp.LinkLocal)
		return err
	}); err != nil {
		return err
	}
	defer conn.Close()
	var f ipv6.ICMPFilter
	f.SetAll(true)
	f.Accept(ipv6.ICMPTypeNeighborAdvertisement)
	if err := conn.SetICMPFilter(&f); err != nil {
		return err
	}
	group, err := ndp.SolicitedNodeMulticast(ip)
	if err != nil {
		return err
	}
	if err := conn.SetReadDeadline(time.Now().Add(whoAnswersWindow)); err != nil {
		return err
	}
	ns := &ndp.NeighborSolicitation{
		TargetAddress: ip,
		Options:       []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Source, Addr: mac}},
	}
	// The destination's zone names eth0, which only means the client's eth0
	// inside the client namespace.
	if err := c.cl.ns.do(func() error { return conn.WriteTo(ns, nil, group) }); err != nil {
		return err
	}
	for {
		msg, _, _, err := conn.ReadFrom()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil
		}
		if err != nil {
			return err
		}
		na, ok := msg.(*ndp.NeighborAdvertisement)
		if !ok || na.TargetAddress != ip {
			continue
		}
		for _, o := range na.Options {
			if lla, ok := o.(*ndp.LinkLayerAddress); ok && lla.Direction == ndp.Target {
				add(lla.Addr)
			}
		}
	}
}

// Neighbor is an entry of the client's neighbour cache.
type Neighbor struct {
	IP    netip.Addr
	MAC   net.HardwareAddr
	State string // REACHABLE, STALE, FAILED, …
}

// ClientNeigh lists the client namespace's neighbour cache on eth0: which
// MAC the LAN's client currently sends each address's traffic to.
func (c *Cluster) ClientNeigh() ([]Neighbor, error) {
	h, link, err := c.device(c.cl, "eth0")
	if err != nil {
		return nil, err
	}
	defer h.Close()
	var out []Neighbor
	for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		neighs, err := h.NeighList(link.Attrs().Index, family)
		if err != nil {
			return nil, fmt.Errorf("list client neighbours: %w", err)
		}
		for _, n := range neighs {
			ip, ok := netip.AddrFromSlice(n.IP)
			if !ok {
				continue
			}
			out = append(out, Neighbor{IP: ip.Unmap(), MAC: n.HardwareAddr, State: neighState(n.State)})
		}
	}
	return out, nil
}

func neighState(s int) string {
	names := []struct {
		bit  int
		name string
	}{
		{netlink.NUD_INCOMPLETE, "INCOMPLETE"}, {netlink.NUD_REACHABLE, "REACHABLE"},
		{netlink.NUD_STALE, "STALE"}, {netlink.NUD_DELAY, "DELAY"}, {netlink.NUD_PROBE, "PROBE"},
		{netlink.NUD_FAILED, "FAILED"}, {netlink.NUD_NOARP, "NOARP"}, {netlink.NUD_PERMANENT, "PERMANENT"},
	}
	for _, n := range names {
		if s&n.bit != 0 {
			return n.name
		}
	}
	return "NONE"
}

// EipdDevice is the first device eipd binds addresses on (netif.Tuns), as
// the first eipd in a node's namespace names it; eipd opens eipd1 and on
// as it binds more than 256.
const EipdDevice = "eipd0"

// NodeAddrs lists the addresses on the node's eth0 and on eipd's devices,
// except IPv6 link-local ones: its own LAN addresses and whatever eipd
// bound.
func (c *Cluster) NodeAddrs(node string) ([]netip.Prefix, error) {
	n, err := c.nodeEndpoint(node)
	if err != nil {
		return nil, err
	}
	h, err := netlink.NewHandleAt(n.ns.handle)
	if err != nil {
		return nil, fmt.Errorf("netlink in %s: %w", n.ns.name, err)
	}
	defer h.Close()
	links, err := h.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list links of %s: %w", node, err)
	}
	ours := map[int]bool{}
	for _, l := range links {
		if name := l.Attrs().Name; name == "eth0" || strings.HasPrefix(name, "eipd") {
			ours[l.Attrs().Index] = true
		}
	}
	// One listing of the namespace: netlink lists every address for a
	// link too, and drops the others itself.
	out, err := linkAddrs(h, nil, func(a netlink.Addr) bool { return ours[a.LinkIndex] })
	if err != nil {
		return nil, fmt.Errorf("list addresses of %s: %w", node, err)
	}
	return out, nil
}

// NodeAddrsOn is NodeAddrs for the node's device dev.
func (c *Cluster) NodeAddrsOn(node, dev string) ([]netip.Prefix, error) {
	n, err := c.nodeEndpoint(node)
	if err != nil {
		return nil, err
	}
	h, link, err := c.device(n, dev)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	out, err := linkAddrs(h, link, func(netlink.Addr) bool { return true })
	if err != nil {
		return nil, fmt.Errorf("list addresses of %s: %w", node, err)
	}
	return out, nil
}

// linkAddrs lists link's addresses (every link's if nil) that keep
// accepts, except IPv6 link-local ones. A listing that races a change
// (daemons binding thousands of addresses) is marked interrupted by the
// kernel: it lists again, for up to about a second.
func linkAddrs(h *netlink.Handle, link netlink.Link, keep func(netlink.Addr) bool) ([]netip.Prefix, error) {
	addrs, err := h.AddrList(link, netlink.FAMILY_ALL)
	for try := 0; errors.Is(err, netlink.ErrDumpInterrupted) && try < 100; try++ {
		time.Sleep(10 * time.Millisecond)
		addrs, err = h.AddrList(link, netlink.FAMILY_ALL)
	}
	if err != nil {
		return nil, err
	}
	var out []netip.Prefix
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok || ip.Is6() && ip.IsLinkLocalUnicast() || !keep(a) {
			continue
		}
		ones, _ := a.Mask.Size()
		out = append(out, netip.PrefixFrom(ip.Unmap(), ones))
	}
	return out, nil
}

// NodeHasAddr reports whether ip is bound on the node's eth0 or eipd's
// device.
func (c *Cluster) NodeHasAddr(node string, ip netip.Addr) (bool, error) {
	addrs, err := c.NodeAddrs(node)
	if err != nil {
		return false, err
	}
	for _, a := range addrs {
		if a.Addr() == ip {
			return true, nil
		}
	}
	return false, nil
}

// device opens a netlink handle in the endpoint's namespace and finds dev.
func (c *Cluster) device(e *endpoint, dev string) (*netlink.Handle, netlink.Link, error) {
	h, err := netlink.NewHandleAt(e.ns.handle)
	if err != nil {
		return nil, nil, fmt.Errorf("netlink in %s: %w", e.ns.name, err)
	}
	link, err := h.LinkByName(dev)
	if err != nil {
		h.Close()
		return nil, nil, fmt.Errorf("%s in %s: %w", dev, e.ns.name, err)
	}
	return h, link, nil
}
