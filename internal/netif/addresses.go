package netif

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// netlinkTimeout bounds every netlink request, so a wedged kernel call
// surfaces as an error instead of a stuck reconciler.
const netlinkTimeout = 5 * time.Second

// foreverLifetime is the kernel's INFINITY_LIFE_TIME.
const foreverLifetime = 0xFFFFFFFF

// Addresses binds prefixes with netlink, in the network namespace it was
// created in. It is safe for concurrent use.
type Addresses struct {
	log *slog.Logger
	ns  netNamespace
	nl  *netlink.Handle
	// dumper lists addresses, one interface's at a time.
	dumper *addrDumper
	err    error // a failed construction, returned by every method

	mu sync.Mutex
	// known holds, per interface, the prefix lengths each address is bound
	// with, as last listed and then updated by Add and Del, so that Add
	// lists an interface once rather than on every binding.
	known map[string]*knownAddrs
	// links holds the interfaces Add looked up, by name: the agent
	// refreshes every bound address each renew interval, and looking the
	// interface up was half the cost of a refresh. Add looks an interface
	// up again when the kernel says it is gone (recreated under the same
	// name); List always does, so a renamed interface is noticed at the
	// agent's next resync.
	links map[string]netlink.Link

	// refreshMu serializes Refresh, which owns refreshFD (-1: not open).
	refreshMu sync.Mutex
	refreshFD int

	// subnets caches, per family, the addresses IfaceFor chooses among
	// (host addresses left out), and the names of their links, for
	// subnetsTTL.
	subnetsMu sync.Mutex
	subnets   map[int]*subnetList
}

// subnetsTTL is how long IfaceFor trusts the node's subnets as listed.
// The agent resolves every new IP: at a cold start of thousands of IPs
// that was a listing of every interface per IP.
const subnetsTTL = time.Second

type subnetList struct {
	at    time.Time
	addrs []ifAddr
	names map[int]string // link names by index, looked up since at
}

type knownAddrs struct {
	link int // a recreated interface has a new index and is listed again
	bits map[netip.Addr][]int
}

// NewAddresses returns an adapter bound to the calling thread's network
// namespace. A failure to open netlink is reported by every method.
func NewAddresses(log *slog.Logger) *Addresses {
	a := &Addresses{log: log, known: map[string]*knownAddrs{}, links: map[string]netlink.Link{}, refreshFD: -1}
	a.ns, a.err = currentNetNamespace()
	if a.err != nil {
		return a
	}
	if a.nl, a.err = newNetlinkHandle(a.ns); a.err != nil {
		_ = a.ns.close()
		return a
	}
	if a.dumper, a.err = openAddrDumper(a.ns); a.err != nil {
		a.nl.Close()
		_ = a.ns.close()
	}
	return a
}

// newNetlinkHandle opens a netlink socket in ns. It opens the socket on a
// thread already in ns rather than with netlink.NewHandleAt, which always
// calls setns(2), even into the namespace the thread is in, and setns needs
// CAP_SYS_ADMIN: eipd holds only NET_ADMIN and NET_RAW.
func newNetlinkHandle(ns netNamespace) (*netlink.Handle, error) {
	var h *netlink.Handle
	err := ns.do(func() error {
		var err error
		h, err = netlink.NewHandle(unix.NETLINK_ROUTE)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("open netlink: %w", err)
	}
	if err := h.SetSocketTimeout(netlinkTimeout); err != nil {
		h.Close()
		return nil, fmt.Errorf("set netlink timeout: %w", err)
	}
	return h, nil
}

// Close releases the netlink socket.
func (a *Addresses) Close() {
	if a.err != nil {
		return
	}
	a.nl.Close()
	a.dumper.close()
	a.refreshMu.Lock()
	if a.refreshFD >= 0 {
		_ = unix.Close(a.refreshFD)
		a.refreshFD = -1
	}
	a.refreshMu.Unlock()
	_ = a.ns.close()
	a.err = errors.New("addresses closed")
}

// Add binds p on iface with the given kernel valid and preferred lifetime:
// whole seconds rounded down, at least one; 0 means forever. Re-adding
// refreshes the lifetime. IPv6 addresses skip duplicate address detection so
// that they are usable at once. Bindings of p's address on iface with another
// prefix length are removed, so the result is exactly p (for IPv6 the kernel
// would otherwise keep the old length). Add learns which lengths exist from
// one listing of the interface, kept current by Add, Del and List; a binding
// with another length made by someone else since is removed by the next Del,
// or noticed after the next List.
func (a *Addresses) Add(iface string, p netip.Prefix, lifetime time.Duration) error {
	if err := a.check(p); err != nil {
		return fmt.Errorf("bind %s on %s: %w", p, iface, err)
	}
	secs, err := lifetimeSeconds(lifetime)
	if err != nil {
		return fmt.Errorf("bind %s on %s: %w", p, iface, err)
	}
	link, err := a.cachedLink(iface)
	if err != nil {
		return fmt.Errorf("bind %s on %s: %w", p, iface, err)
	}
	err = a.add(link, iface, p, secs, lifetime)
	if errors.Is(err, unix.ENODEV) {
		// The interface looked up before is gone: perhaps recreated.
		if link, err = a.lookupLink(iface); err == nil {
			err = a.add(link, iface, p, secs, lifetime)
		}
	}
	if err != nil {
		return fmt.Errorf("bind %s on %s: %w", p, iface, err)
	}
	return nil
}

// add binds p on link with a lifetime of secs seconds.
func (a *Addresses) add(link netlink.Link, iface string, p netip.Prefix, secs int, lifetime time.Duration) error {
	bits, err := a.lengths(link, p.Addr())
	if err != nil {
		return err
	}
	if slices.ContainsFunc(bits, func(b int) bool { return b != p.Bits() }) {
		if err := a.delMatching(link, p.Addr(), p.Bits()); err != nil {
			return err
		}
	}
	addr := &netlink.Addr{IPNet: ipNet(p), ValidLft: secs, PreferedLft: secs, Flags: addrFlags(p)}
	if err := a.nl.AddrReplace(link, addr); err != nil {
		return err
	}
	if !slices.Equal(bits, []int{p.Bits()}) {
		a.log.Debug("bound address", "ip", p.Addr(), "iface", iface, "prefix", p, "lifetime", lifetime)
		a.remember(link, p.Addr(), []int{p.Bits()})
	}
	return nil
}

// addrFlags are the flags an address is bound with: IPv6 addresses skip
// duplicate address detection, and a host address (/32, /128) makes no
// route to itself through the device (the local route is enough).
func addrFlags(p netip.Prefix) int {
	f := 0
	if p.Addr().Is6() {
		f |= unix.IFA_F_NODAD
	}
	if p.IsSingleIP() {
		f |= unix.IFA_F_NOPREFIXROUTE
	}
	return f
}

// lengths returns the prefix lengths ip is known to be bound with on link,
// listing the link's addresses if it is not known yet.
func (a *Addresses) lengths(link netlink.Link, ip netip.Addr) ([]int, error) {
	a.mu.Lock()
	if k, ok := a.known[link.Attrs().Name]; ok && k.link == link.Attrs().Index {
		defer a.mu.Unlock()
		return slices.Clone(k.bits[ip]), nil
	}
	a.mu.Unlock()
	var k *knownAddrs
	if err := a.dumper.list(link.Attrs().Index, netlink.FAMILY_ALL, func(addrs []ifAddr) { k = a.learn(link, addrs) }); err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(k.bits[ip]), nil
}

// learn replaces what is known about link with a listing of it, unless
// the listing agrees with it: the agent lists eipd's device every resync
// period, and its thousands of addresses rarely change between two.
func (a *Addresses) learn(link netlink.Link, addrs []ifAddr) *knownAddrs {
	a.mu.Lock()
	if k, ok := a.known[link.Attrs().Name]; ok && k.agrees(link.Attrs().Index, addrs) {
		a.mu.Unlock()
		return k
	}
	a.mu.Unlock()
	k := &knownAddrs{link: link.Attrs().Index, bits: make(map[netip.Addr][]int, len(addrs))}
	// An address's first length takes a slot of one array rather than a
	// slice of its own: eipd's device holds thousands, each with one.
	first := make([]int, len(addrs))
	for i, ia := range addrs {
		ip := ia.prefix.Addr()
		if bits, ok := k.bits[ip]; ok {
			k.bits[ip] = append(bits, ia.prefix.Bits())
			continue
		}
		first[i] = ia.prefix.Bits()
		k.bits[ip] = first[i : i+1 : i+1]
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.known[link.Attrs().Name] = k
	return k
}

// agrees says whether k is what a listing of the link with that index
// found, addrs.
func (k *knownAddrs) agrees(link int, addrs []ifAddr) bool {
	if k.link != link {
		return false
	}
	n := 0
	for _, bits := range k.bits {
		n += len(bits)
	}
	if n != len(addrs) {
		return false
	}
	for _, ia := range addrs {
		if !slices.Contains(k.bits[ia.prefix.Addr()], ia.prefix.Bits()) {
			return false
		}
	}
	return true
}

// remember records ip's lengths on link (none: unbound) if link is known.
func (a *Addresses) remember(link netlink.Link, ip netip.Addr, bits []int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	k, ok := a.known[link.Attrs().Name]
	if !ok || k.link != link.Attrs().Index {
		return
	}
	if len(bits) == 0 {
		delete(k.bits, ip)
		return
	}
	k.bits[ip] = bits
}

// Del removes p's address, with any prefix length, from iface. An address or
// interface that is not there is not an error. Del lists the interface, so
// that an unbind leaves no binding behind, unless p is a host address that
// Add or a listing left as the only binding of its address there (a host
// address takes no secondaries with it): unbinding thousands of addresses
// from eipd's device then costs a request each, not a listing of them all
// each.
func (a *Addresses) Del(iface string, p netip.Prefix) error {
	if err := a.check(p); err != nil {
		return fmt.Errorf("unbind %s from %s: %w", p, iface, err)
	}
	link, err := a.nl.LinkByName(iface)
	if errors.As(err, &netlink.LinkNotFoundError{}) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("unbind %s from %s: find link: %w", p, iface, err)
	}
	if p.IsSingleIP() && a.boundOnlyAs(link, p) {
		err := a.nl.AddrDel(link, &netlink.Addr{IPNet: ipNet(p)})
		if err == nil || errors.Is(err, unix.EADDRNOTAVAIL) {
			a.remember(link, p.Addr(), nil)
			return nil
		}
	}
	if err := a.delMatching(link, p.Addr(), -1); err != nil {
		return fmt.Errorf("unbind %s from %s: %w", p, iface, err)
	}
	a.remember(link, p.Addr(), nil)
	return nil
}

// boundOnlyAs says whether p is known to be its address's only binding on
// link.
func (a *Addresses) boundOnlyAs(link netlink.Link, p netip.Prefix) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	k, ok := a.known[link.Attrs().Name]
	return ok && k.link == link.Attrs().Index && slices.Equal(k.bits[p.Addr()], []int{p.Bits()})
}

// delMatching removes every binding of ip on link except one with keepBits.
func (a *Addresses) delMatching(link netlink.Link, ip netip.Addr, keepBits int) error {
	addrs, err := a.list(link, family(ip))
	if err != nil {
		return err
	}
	var all []ifAddr
	for _, ad := range addrs {
		if ia, ok := toIfAddr(ad); ok {
			all = append(all, ia)
		}
	}
	var errs error
	for i, ia := range all {
		if ia.prefix.Addr() != ip || ia.prefix.Bits() == keepBits {
			continue
		}
		if takesSecondaries(all, ia) {
			// If the setting cannot be changed, unbind anyway: an address
			// left behind would answer for an IP we gave away. The kernel
			// then drops the subnet's secondaries too; the agent restores
			// those it holds from the address events.
			if err := a.promoteSecondaries(link); err != nil {
				a.log.Warn("cannot keep secondary addresses while removing a primary; they will be restored", "iface", link.Attrs().Name, "ip", ip, "err", err)
			}
		}
		ad := addrs[i]
		err := a.nl.AddrDel(link, &ad)
		if err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) && !errors.Is(err, unix.ENODEV) {
			errs = errors.Join(errs, fmt.Errorf("delete %s: %w", ia.prefix, err))
		}
	}
	return errs
}

// promoteSecondaries makes the kernel keep an IPv4 subnet's secondary
// addresses when its primary is removed; by default it deletes them all,
// which would take other external IPs (or the node's own address) down with
// the one being unbound. It reads the setting from /proc/sys, which a pod
// may read, and changes it over rtnetlink (IFLA_INET_CONF), which needs
// only CAP_NET_ADMIN: a container's /proc/sys is mounted read-only.
func (a *Addresses) promoteSecondaries(link netlink.Link) error {
	iface := link.Attrs().Name
	path := "/proc/sys/net/ipv4/conf/" + iface + "/promote_secondaries"
	return a.ns.do(func() error {
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("read %s: %w", path, err)
		}
		if strings.TrimSpace(string(b)) == "1" {
			return nil
		}
		req := nl.NewNetlinkRequest(unix.RTM_SETLINK, unix.NLM_F_ACK)
		msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
		msg.Index = int32(link.Attrs().Index)
		req.AddData(msg)
		spec := nl.NewRtAttr(unix.IFLA_AF_SPEC, nil)
		conf := spec.AddRtAttr(unix.AF_INET, nil).AddRtAttr(unix.IFLA_INET_CONF, nil)
		conf.AddRtAttr(ipv4DevconfPromoteSecondaries, nl.Uint32Attr(1))
		req.AddData(spec)
		if _, err := req.Execute(unix.NETLINK_ROUTE, 0); err != nil {
			return fmt.Errorf("enable promote_secondaries on %s: %w", iface, err)
		}
		a.log.Info("enabled promote_secondaries so that removing a primary address keeps its secondaries", "iface", iface)
		return nil
	})
}

// ipv4DevconfPromoteSecondaries is IPV4_DEVCONF_PROMOTE_SECONDARIES in
// linux/ip.h, which x/sys/unix does not define.
const ipv4DevconfPromoteSecondaries = 20

// List returns the global-scope addresses on iface.
func (a *Addresses) List(iface string) ([]netip.Prefix, error) {
	if a.err != nil {
		return nil, fmt.Errorf("list addresses on %s: %w", iface, a.err)
	}
	link, err := a.lookupLink(iface)
	if err != nil {
		return nil, fmt.Errorf("list addresses on %s: %w", iface, err)
	}
	var out []netip.Prefix
	err = a.dumper.list(link.Attrs().Index, netlink.FAMILY_ALL, func(addrs []ifAddr) {
		a.learn(link, addrs)
		out = make([]netip.Prefix, 0, len(addrs))
		for _, ia := range addrs {
			if ia.global {
				out = append(out, ia.prefix)
			}
		}
	})
	if err != nil {
		return nil, fmt.Errorf("list addresses on %s: %w", iface, err)
	}
	return out, nil
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

func (a *Addresses) check(p netip.Prefix) error {
	if a.err != nil {
		return a.err
	}
	if !p.IsValid() || p.Addr().Is4In6() || p.Addr().Zone() != "" {
		return fmt.Errorf("invalid prefix %q", p)
	}
	return nil
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

func (a *Addresses) list(link netlink.Link, fam int) ([]netlink.Addr, error) {
	return listAddrs(a.nl, link, fam)
}

func listAddrs(h *netlink.Handle, link netlink.Link, fam int) ([]netlink.Addr, error) {
	addrs, err := dump(func() ([]netlink.Addr, error) { return h.AddrList(link, fam) })
	if err != nil {
		return nil, fmt.Errorf("list addresses: %w", err)
	}
	return addrs, nil
}

// dump retries a netlink dump that the kernel marks as interrupted by a
// concurrent change, since its result may be inconsistent.
func dump[T any](list func() ([]T, error)) ([]T, error) {
	const attempts = 5
	var err error
	for range attempts {
		var out []T
		if out, err = list(); !errors.Is(err, netlink.ErrDumpInterrupted) {
			return out, err
		}
	}
	return nil, err
}

// lifetimeSeconds converts a binding lifetime into the kernel's seconds.
func lifetimeSeconds(d time.Duration) (int, error) {
	switch {
	case d < 0:
		return 0, fmt.Errorf("negative lifetime %s", d)
	case d == 0:
		return foreverLifetime, nil
	case d < time.Second:
		return 1, nil
	case d/time.Second >= foreverLifetime:
		return foreverLifetime, nil
	}
	return int(d / time.Second), nil
}

// ifAddr is an interface address as the pure helpers here see it.
type ifAddr struct {
	link      int
	prefix    netip.Prefix
	global    bool
	secondary bool
}

func toIfAddr(ad netlink.Addr) (ifAddr, bool) {
	if ad.IPNet == nil {
		return ifAddr{}, false
	}
	ip, ok := netip.AddrFromSlice(ad.IP)
	if !ok {
		return ifAddr{}, false
	}
	ones, _ := ad.Mask.Size()
	return newIfAddr(ad.LinkIndex, netip.PrefixFrom(ip.Unmap(), ones), ad.Scope, ad.Flags), true
}

// newIfAddr is the address p on the link with that index, with the
// kernel's scope and flags.
func newIfAddr(link int, p netip.Prefix, scope, flags int) ifAddr {
	return ifAddr{
		link:      link,
		prefix:    p,
		global:    scope == unix.RT_SCOPE_UNIVERSE,
		secondary: p.Addr().Is4() && flags&unix.IFA_F_SECONDARY != 0,
	}
}

// takesSecondaries reports whether the kernel would delete other addresses
// along with target: it is an IPv4 primary and its subnet has secondaries.
func takesSecondaries(all []ifAddr, target ifAddr) bool {
	if !target.prefix.Addr().Is4() || target.secondary {
		return false
	}
	subnet := target.prefix.Masked()
	for _, o := range all {
		if o.secondary && o.link == target.link && o.prefix.Masked() == subnet {
			return true
		}
	}
	return false
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

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

func family(ip netip.Addr) int {
	if ip.Is4() {
		return netlink.FAMILY_V4
	}
	return netlink.FAMILY_V6
}
