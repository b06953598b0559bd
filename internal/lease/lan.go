package lease

import (
	"net"
	"net/netip"
	"slices"
	"strings"
)

// maxAnswers bounds the answers one heartbeat carries: an annotation is
// part of an object every node watches, and a range overlapping a whole
// DHCP pool should not make each renewal kilobytes larger.
const maxAnswers = 64

// FormatMACs is the heartbeat annotation of a node's link-layer
// addresses: canonical text, sorted, comma separated.
func FormatMACs(macs []net.HardwareAddr) string {
	out := make([]string, 0, len(macs))
	for _, m := range macs {
		out = append(out, m.String())
	}
	slices.Sort(out)
	return strings.Join(slices.Compact(out), ",")
}

// ParseMACs reads FormatMACs, in canonical text; what is not a MAC is
// skipped.
func ParseMACs(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if m, err := net.ParseMAC(f); err == nil {
			out = append(out, m.String())
		}
	}
	return out
}

// FormatAnswers is the heartbeat annotation of IPs answered on the LAN by
// machines that are not eip nodes: "ip=mac" comma separated, sorted by IP,
// at most maxAnswers of them (the lowest IPs).
func FormatAnswers(answers map[netip.Addr]string) string {
	ips := slices.SortedFunc(func(yield func(netip.Addr) bool) {
		for ip := range answers {
			if !yield(ip) {
				return
			}
		}
	}, netip.Addr.Compare)
	parts := make([]string, 0, min(len(ips), maxAnswers))
	for _, ip := range ips[:min(len(ips), maxAnswers)] {
		parts = append(parts, ip.String()+"="+answers[ip])
	}
	return strings.Join(parts, ",")
}

// ParseAnswers reads FormatAnswers; a malformed entry is skipped. It
// returns nil when there is none.
func ParseAnswers(s string) map[netip.Addr]string {
	var out map[netip.Addr]string
	for _, f := range strings.Split(s, ",") {
		ipText, macText, ok := strings.Cut(f, "=")
		if !ok {
			continue
		}
		ip, err1 := netip.ParseAddr(ipText)
		mac, err2 := net.ParseMAC(macText)
		if err1 == nil && err2 == nil {
			if out == nil {
				out = map[netip.Addr]string{}
			}
			out[ip.Unmap()] = mac.String()
		}
	}
	return out
}
