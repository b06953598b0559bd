package config

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Range options.
const (
	optName       = "name"
	optNetmask    = "netmask"
	optIface      = "iface"
	optAutoAssign = "auto-assign"
	optNamespaces = "namespaces"
)

// rangeOptions are the options a range line accepts, for messages.
func rangeOptions() []string {
	return []string{optName, optNetmask, optIface, optAutoAssign, optNamespaces, optAnnounce, optCommunities, optLocalPref}
}

// parseRanges reads the ranges value, one range a line, resolving defaults
// from c. It returns the ranges sorted by First, and an error for every bad
// line, repeated name and overlapping pair.
func parseRanges(text string, c Config) ([]Range, error) {
	var (
		rs   []Range
		errs error
	)
	for i, raw := range strings.Split(text, "\n") {
		line, _, _ := strings.Cut(raw, "#")
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		r, err := parseRange(line, c)
		if err != nil {
			errs = errors.Join(errs, fmt.Errorf("%s line %d %q: %w", keyRanges, i+1, line, err))
			continue
		}
		r.Line = i + 1
		rs = append(rs, r)
	}

	names := map[string]int{}
	for _, r := range rs {
		if r.Name == "" {
			continue
		}
		if first, dup := names[r.Name]; dup {
			errs = errors.Join(errs, fmt.Errorf("%s line %d %q: name %q is already used on line %d", keyRanges, r.Line, r.Text, r.Name, first))
			continue
		}
		names[r.Name] = r.Line
	}

	slices.SortStableFunc(rs, func(a, b Range) int { return a.First.Compare(b.First) })
	// Sorted by First, a range overlaps an earlier one exactly when it starts
	// at or before the furthest end reached so far.
	reach := -1
	for i, r := range rs {
		if reach >= 0 && r.First.Compare(rs[reach].Last) <= 0 {
			a, b := rs[reach], r
			if b.Line < a.Line {
				a, b = b, a
			}
			errs = errors.Join(errs, fmt.Errorf("%s line %d %q overlaps line %d %q", keyRanges, b.Line, b.Text, a.Line, a.Text))
		}
		if reach < 0 || r.Last.Compare(rs[reach].Last) > 0 {
			reach = i
		}
	}
	return rs, errs
}

// parseRange reads one line of the ranges value (without comment): an
// address set, then options. Bits and Iface are resolved against c.
func parseRange(line string, c Config) (Range, error) {
	fields := strings.Fields(line)
	if len(fields) == 0 {
		return Range{}, errors.New("is empty")
	}
	if len(fields) > 1 && (strings.HasSuffix(fields[0], "-") || strings.HasPrefix(fields[1], "-")) {
		return Range{}, errors.New("a span is written without spaces around '-', such as 198.18.100.10-198.18.100.20")
	}
	r := Range{Text: strings.TrimSpace(line)}
	if err := r.parseAddrs(fields[0]); err != nil {
		return Range{}, err
	}
	if what := specialOverlap(r.First, r.Last); what != "" {
		return Range{}, fmt.Errorf("includes %s: a range may only hold addresses a node can answer for on the LAN", what)
	}
	if !spanAtMost(r.First, r.Last, MaxRangeBits) {
		return Range{}, fmt.Errorf("holds more than %d addresses (an IPv4 /%d, an IPv6 /%d): write only the addresses eip may serve", 1<<MaxRangeBits, 32-MaxRangeBits, 128-MaxRangeBits)
	}

	r.Iface = c.Iface
	r.Bits = c.Netmask6
	if r.First.Is4() {
		r.Bits = c.Netmask4
	}
	seen := map[string]bool{}
	for _, f := range fields[1:] {
		key, val, hasValue := strings.Cut(f, "=")
		if seen[key] {
			return Range{}, fmt.Errorf("option %q is given twice", key)
		}
		seen[key] = true
		if !hasValue && key != optAutoAssign {
			return Range{}, fmt.Errorf("option %q has no value: write %s=VALUE", f, key)
		}
		switch key {
		case optName:
			if msgs := validation.IsDNS1123Label(val); len(msgs) > 0 {
				return Range{}, fmt.Errorf("name %q is not a valid name: %s", val, strings.Join(msgs, "; "))
			}
			r.Name = val
		case optNetmask:
			n, err := parseBits(val, r.First.Is4())
			if err != nil {
				return Range{}, fmt.Errorf("netmask %q %w", val, err)
			}
			r.Bits = n
		case optIface:
			if err := checkIface(val); err != nil {
				return Range{}, fmt.Errorf("iface %q %w", val, err)
			}
			r.Iface = val
		case optAutoAssign:
			b := true
			if hasValue {
				var err error
				if b, err = strconv.ParseBool(val); err != nil {
					return Range{}, fmt.Errorf("auto-assign %q is not a boolean: use true or false", val)
				}
			}
			r.AutoAssign = b
		case optNamespaces:
			ns, err := parseNamespaces(val)
			if err != nil {
				return Range{}, err
			}
			r.Namespaces = ns
		case optAnnounce:
			switch a := Announce(val); a {
			case AnnounceARP:
				r.Announce = "" // the default, so that writing it changes nothing
			case AnnounceBGP, AnnounceBoth:
				r.Announce = a
			default:
				return Range{}, fmt.Errorf("announce %q is not a mode: use %q, %q or %q", val, AnnounceARP, AnnounceBGP, AnnounceBoth)
			}
		case optCommunities:
			cs, err := parseCommunities(val)
			if err != nil {
				return Range{}, err
			}
			r.Communities = cs
		case optLocalPref:
			n, err := strconv.ParseUint(val, 10, 32)
			if err != nil || n == 0 {
				return Range{}, fmt.Errorf("local-pref %q is not a preference: use 1 to 4294967295", val)
			}
			r.LocalPref = uint32(n)
		default:
			return Range{}, fmt.Errorf("unknown option %q%s: use %s", key, didYouMean(key, rangeOptions()),
				strings.Join(rangeOptions(), ", "))
		}
	}
	return r, r.routeMode(seen)
}

// routeMode settles the options that depend on the announce mode. A bgp-only
// range's addresses are host addresses on eipd's own device, announced on
// no interface (RouteIface), so iface and netmask make no sense there; route attributes make none without BGP.
func (r *Range) routeMode(seen map[string]bool) error {
	if !r.Announce.BGP() {
		for _, o := range []string{optCommunities, optLocalPref} {
			if seen[o] {
				return fmt.Errorf("option %q needs announce=%s or announce=%s", o, AnnounceBGP, AnnounceBoth)
			}
		}
		return nil
	}
	if r.Announce == AnnounceBGP {
		for _, o := range []string{optIface, optNetmask} {
			if seen[o] {
				return fmt.Errorf("option %q has no effect with announce=%s: its addresses are host addresses on eipd's own device; use announce=%s to announce them on a LAN interface too",
					o, AnnounceBGP, AnnounceBoth)
			}
		}
		r.Iface, r.Bits = RouteIface, r.First.BitLen()
	}
	return nil
}

// parseNamespaces reads the namespaces option: namespace names separated
// by commas, sorted and without repeats.
func parseNamespaces(val string) ([]string, error) {
	var out []string
	for _, n := range strings.Split(val, ",") {
		if msgs := validation.IsDNS1123Label(n); len(msgs) > 0 {
			return nil, fmt.Errorf("namespaces %q: %q is not a namespace name: %s; write namespaces=NAME[,NAME...] without spaces", val, n, strings.Join(msgs, "; "))
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// parseAddrs reads a CIDR, a first-last span or a single address into r.
func (r *Range) parseAddrs(s string) error {
	if addr, _, isPrefix := strings.Cut(s, "/"); isPrefix {
		if _, err := parseAddr(addr); err != nil {
			return err
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return fmt.Errorf("%q is not a CIDR: write it as 198.18.100.0/24 or 2001:db8:100::/120", s)
		}
		if m := p.Masked(); m != p {
			return fmt.Errorf("%s has host bits set: did you mean %s?", p, m)
		}
		r.Prefix, r.First, r.Last = p, p.Addr(), lastAddr(p)
		return nil
	}
	if first, last, isSpan := strings.Cut(s, "-"); isSpan {
		a, err := parseAddr(first)
		if err != nil {
			return err
		}
		b, err := parseAddr(last)
		if err != nil {
			return err
		}
		if a.BitLen() != b.BitLen() {
			return fmt.Errorf("%s and %s are of different families", a, b)
		}
		if a.Compare(b) > 0 {
			return fmt.Errorf("first address %s is after last address %s", a, b)
		}
		r.First, r.Last = a, b
		return nil
	}
	a, err := parseAddr(s)
	if err != nil {
		return err
	}
	r.First, r.Last = a, a
	return nil
}

// parseAddr reads one end of a range, refusing zones and IPv4-mapped forms.
func parseAddr(s string) (netip.Addr, error) {
	const help = "write a CIDR (198.18.100.0/24), a span (198.18.100.10-198.18.100.20) or an address"
	if s == "" {
		return netip.Addr{}, fmt.Errorf("an address is missing: %s", help)
	}
	if strings.Contains(s, "%") {
		return netip.Addr{}, fmt.Errorf("%q has an IPv6 zone: zones are not allowed", s)
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%q is not an IP address: %s", s, help)
	}
	if a.Is4In6() {
		return netip.Addr{}, fmt.Errorf("%s is an IPv4-mapped IPv6 address: write %s", s, a.Unmap())
	}
	return a, nil
}

// MaxRangeBits bounds a range to 2^MaxRangeBits addresses, an IPv4 /8 or
// an IPv6 /104: far more than one LAN serves, and a typo such as a /64
// for a /120 is refused rather than opened to every tenant.
const MaxRangeBits = 24

// spanAtMost says whether first..last, of one family with first not after
// last, holds at most 2^n addresses.
func spanAtMost(first, last netip.Addr, n int) bool {
	a, b := first.As16(), last.As16()
	lo, borrow := bits.Sub64(binary.BigEndian.Uint64(b[8:]), binary.BigEndian.Uint64(a[8:]), 0)
	hi, _ := bits.Sub64(binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(a[:8]), borrow)
	return hi == 0 && lo < 1<<n
}
