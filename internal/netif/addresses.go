package netif

import (
	"errors"
	"fmt"
	"log/slog"
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

func (a *Addresses) check(p netip.Prefix) error {
	if a.err != nil {
		return a.err
	}
	if !p.IsValid() || p.Addr().Is4In6() || p.Addr().Zone() != "" {
		return fmt.Errorf("invalid prefix %q", p)
	}
	return nil
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
