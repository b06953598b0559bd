package netif

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// subnetsTTL is how long IfaceFor trusts the node's subnets as listed.
// The agent resolves every new IP: at a cold start of thousands of IPs
// that was a listing of every interface per IP.
const subnetsTTL = time.Second

type subnetList struct {
	at    time.Time
	addrs []ifAddr
	names map[int]string // link names by index, looked up since at
}

// IfaceFor returns the interface whose connected subnet contains ip: the one
// with the longest global-scope prefix containing it. Host-length prefixes
// (/32, /128) define no subnet and are ignored.
func (a *Addresses) IfaceFor(ip netip.Addr) (string, error) {
	if a.err != nil {
		return "", fmt.Errorf("find interface for %s: %w", ip, a.err)
	}
	ip = ip.Unmap()
	subnets, err := a.subnetsOf(family(ip))
	if err != nil {
		return "", fmt.Errorf("find interface for %s: %w", ip, err)
	}
	index, ok := connectedLink(subnets.addrs, ip)
	if !ok {
		return "", fmt.Errorf("find interface for %s: no connected subnet contains it", ip)
	}
	name, err := a.linkName(subnets, index)
	if err != nil {
		return "", fmt.Errorf("find interface for %s: link %d: %w", ip, index, err)
	}
	return name, nil
}

// linkName is the name of the link with index, looked up once for each
// listing of the subnets l and trusted as long as it is: at a cold start of
// thousands of IPs, a netlink lookup of the link, every attribute parsed,
// for each IP was an eighth of what eipd allocated.
func (a *Addresses) linkName(l *subnetList, index int) (string, error) {
	a.subnetsMu.Lock()
	defer a.subnetsMu.Unlock()
	if name, ok := l.names[index]; ok {
		return name, nil
	}
	link, err := a.nl.LinkByIndex(index)
	if err != nil {
		return "", err
	}
	l.names[index] = link.Attrs().Name
	return link.Attrs().Name, nil
}

// subnetsOf returns the node's addresses of family fam that are not host
// addresses, listed at most subnetsTTL ago.
func (a *Addresses) subnetsOf(fam int) (*subnetList, error) {
	a.subnetsMu.Lock()
	defer a.subnetsMu.Unlock()
	if l, ok := a.subnets[fam]; ok && time.Since(l.at) < subnetsTTL {
		return l, nil
	}
	addrs, err := a.listSubnetLinks(fam)
	if err != nil {
		return nil, err
	}
	var out []ifAddr
	for _, ia := range addrs {
		if ia.prefix.Bits() < ia.prefix.Addr().BitLen() {
			out = append(out, ia)
		}
	}
	if a.subnets == nil {
		a.subnets = map[int]*subnetList{}
	}
	l := &subnetList{at: time.Now(), addrs: out, names: map[int]string{}}
	a.subnets[fam] = l
	return l, nil
}

// listSubnetLinks lists the addresses of family fam on every interface
// but those known to hold host addresses only (hostOnlyLinks): eipd's
// device holds thousands, and defines no subnet. The kernel filters by
// interface only under strict checking; without it one dump of every
// interface costs less than one per interface.
func (a *Addresses) listSubnetLinks(fam int) ([]ifAddr, error) {
	var out []ifAddr
	keep := func(addrs []ifAddr) { out = append(out, addrs...) }
	if !a.dumper.strict {
		err := a.dumper.list(0, fam, keep)
		return out, err
	}
	links, err := dump(a.nl.LinkList)
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	skip := a.hostOnlyLinks()
	for _, l := range links {
		if skip[l.Attrs().Index] {
			continue
		}
		err := a.dumper.list(l.Attrs().Index, fam, keep)
		if errors.Is(err, unix.ENODEV) {
			continue // deleted since the links were listed
		}
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// hostOnlyLinks returns the indexes of the interfaces whose addresses
// this adapter knows, all of them host addresses (/32, /128): as of the
// interface's last listing (the agent's resync lists eipd's device every
// resync period) and the bindings made and removed here since.
func (a *Addresses) hostOnlyLinks() map[int]bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[int]bool{}
	for _, k := range a.known {
		if k.hostOnly() {
			out[k.link] = true
		}
	}
	return out
}

func (k *knownAddrs) hostOnly() bool {
	for ip, bits := range k.bits {
		for _, b := range bits {
			if b != ip.BitLen() {
				return false
			}
		}
	}
	return true
}

// HardwareAddr returns iface's link-layer address.
func (a *Addresses) HardwareAddr(iface string) (net.HardwareAddr, error) {
	link, err := a.link(iface)
	if err != nil {
		return nil, fmt.Errorf("hardware address of %s: %w", iface, err)
	}
	return link.Attrs().HardwareAddr, nil
}

// MACs returns the link-layer addresses of the node's Ethernet interfaces
// (loopback and tunnels have none): what the LAN sees answering from this
// node.
func (a *Addresses) MACs() ([]net.HardwareAddr, error) {
	if a.err != nil {
		return nil, a.err
	}
	links, err := dump(a.nl.LinkList)
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	var out []net.HardwareAddr
	for _, l := range links {
		if mac := l.Attrs().HardwareAddr; len(mac) == 6 && !slices.Equal(mac, make(net.HardwareAddr, 6)) {
			out = append(out, mac)
		}
	}
	return out, nil
}

// AnswersARP reports whether the kernel answers ARP requests arriving on
// iface for an IPv4 address bound on another device (a [Tun]): it does
// while arp_ignore is 0, the default, on the interface and in "all" (the
// kernel uses the larger). kube-proxy's IPVS mode with strictARP sets it to
// 1. It reads /proc/sys, which a container may read.
func (a *Addresses) AnswersARP(iface string) (bool, error) {
	if a.err != nil {
		return false, a.err
	}
	answers := true
	err := a.ns.do(func() error {
		for _, conf := range []string{"all", iface} {
			path := "/proc/sys/net/ipv4/conf/" + conf + "/arp_ignore"
			b, err := os.ReadFile(path)
			if err != nil {
				return fmt.Errorf("read %s: %w", path, err)
			}
			if strings.TrimSpace(string(b)) != "0" {
				answers = false
			}
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("arp_ignore of %s: %w", iface, err)
	}
	return answers, nil
}

// Up reports whether iface is administratively up and has carrier.
func (a *Addresses) Up(iface string) (bool, error) {
	link, err := a.link(iface)
	if err != nil {
		return false, fmt.Errorf("state of %s: %w", iface, err)
	}
	return linkUp(link.Attrs()), nil
}

// cachedLink returns the interface named iface as last looked up.
func (a *Addresses) cachedLink(iface string) (netlink.Link, error) {
	a.mu.Lock()
	link, ok := a.links[iface]
	a.mu.Unlock()
	if ok {
		return link, nil
	}
	return a.lookupLink(iface)
}

// lookupLink looks iface up and keeps the answer for cachedLink.
func (a *Addresses) lookupLink(iface string) (netlink.Link, error) {
	link, err := a.link(iface)
	a.mu.Lock()
	defer a.mu.Unlock()
	if err != nil {
		delete(a.links, iface)
		return nil, err
	}
	a.links[iface] = link
	return link, nil
}

func (a *Addresses) link(iface string) (netlink.Link, error) {
	if a.err != nil {
		return nil, a.err
	}
	link, err := a.nl.LinkByName(iface)
	if err != nil {
		return nil, fmt.Errorf("find link: %w", err)
	}
	return link, nil
}

// connectedLink picks the link whose subnet contains ip: longest global
// prefix first; on a tie, an address other than ip itself (the node's own
// address rather than a bound external IP), then the lowest link index.
func connectedLink(all []ifAddr, ip netip.Addr) (int, bool) {
	best, found := ifAddr{}, false
	better := func(c ifAddr) bool {
		if !found || c.prefix.Bits() != best.prefix.Bits() {
			return !found || c.prefix.Bits() > best.prefix.Bits()
		}
		cSelf, bSelf := c.prefix.Addr() == ip, best.prefix.Addr() == ip
		if cSelf != bSelf {
			return bSelf
		}
		return c.link < best.link
	}
	for _, c := range all {
		if !c.global || c.prefix.Bits() >= ip.BitLen() || !c.prefix.Contains(ip) {
			continue
		}
		if better(c) {
			best, found = c, true
		}
	}
	return best.link, found
}

// linkUp reports whether a link can carry traffic: administratively up, with
// carrier, and not reported down by its driver (drivers that do not track
// operational state report "unknown").
func linkUp(attrs *netlink.LinkAttrs) bool {
	if attrs.Flags&net.FlagUp == 0 || attrs.RawFlags&unix.IFF_LOWER_UP == 0 {
		return false
	}
	return attrs.OperState == netlink.OperUp || attrs.OperState == netlink.OperUnknown
}
