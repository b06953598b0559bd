package config

import (
	"fmt"
	"net/netip"
)

// block is a set of addresses that no host may answer for on a LAN.
type block struct {
	prefix netip.Prefix
	one    string // how to call one address of the block
	many   string // how to call the block
}

// specialBlocks returns the blocks that ranges must not touch and that are
// never bound. It returns an array, built without parsing, so that calling it
// once per address costs no allocation.
func specialBlocks() [10]block {
	v4 := func(a, b byte, bits int) netip.Prefix { return netip.PrefixFrom(netip.AddrFrom4([4]byte{a, b}), bits) }
	v6 := func(hi uint16, bits int) netip.Prefix {
		return netip.PrefixFrom(netip.AddrFrom16([16]byte{byte(hi >> 8), byte(hi)}), bits)
	}
	return [...]block{
		{v4(0, 0, 8), `an address of 0.0.0.0/8 ("this network")`, `0.0.0.0/8 ("this network")`},
		{v4(127, 0, 8), "a loopback address", "loopback addresses (127.0.0.0/8)"},
		{v4(169, 254, 16), "a link-local address", "link-local addresses (169.254.0.0/16)"},
		{v4(224, 0, 4), "a multicast address", "multicast addresses (224.0.0.0/4)"},
		{netip.PrefixFrom(netip.AddrFrom4([4]byte{255, 255, 255, 255}), 32), "the limited broadcast address", "the limited broadcast address 255.255.255.255"},
		{v6(0, 128), "the unspecified address", "the unspecified address ::"},
		{netip.PrefixFrom(netip.IPv6Loopback(), 128), "a loopback address", "the loopback address ::1"},
		{netip.PrefixFrom(netip.AddrFrom16([16]byte{10: 0xff, 11: 0xff}), 96), "an IPv4-mapped IPv6 address", "IPv4-mapped IPv6 addresses (::ffff:0:0/96)"},
		{v6(0xfe80, 10), "a link-local address", "link-local addresses (fe80::/10)"},
		{v6(0xff00, 8), "a multicast address", "multicast addresses (ff00::/8)"},
	}
}

// Unusable returns why ip may never be bound, whatever the ranges say, or ""
// when it may be. The reason is a sentence fragment such as
// "a loopback address".
func Unusable(ip netip.Addr) string {
	switch {
	case !ip.IsValid():
		return "not an IP address"
	case ip.Zone() != "":
		return "an address with an IPv6 zone"
	case ip.Is4In6():
		return fmt.Sprintf("an IPv4-mapped IPv6 address (write %s)", ip.Unmap())
	}
	for _, b := range specialBlocks() {
		if b.prefix.Contains(ip) {
			return b.one
		}
	}
	return ""
}

// specialOverlap returns the special block that [first, last] touches, as a
// phrase, or "" when there is none.
func specialOverlap(first, last netip.Addr) string {
	for _, b := range specialBlocks() {
		lo, hi := b.prefix.Addr(), lastAddr(b.prefix)
		if lo.BitLen() == first.BitLen() && first.Compare(hi) <= 0 && lo.Compare(last) <= 0 {
			return b.many
		}
	}
	return ""
}

// lastAddr returns the highest address of p.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}
