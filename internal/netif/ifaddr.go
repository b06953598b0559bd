package netif

import (
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

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

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

func family(ip netip.Addr) int {
	if ip.Is4() {
		return netlink.FAMILY_V4
	}
	return netlink.FAMILY_V6
}
