package wire

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// maxEntries bounds the entries one report carries: it rides on a
// heartbeat every node watches, and a range taken over by another DHCP
// server must not make each renewal kilobytes larger. Beyond it, More
// counts the rest.
const maxEntries = 64

// deafMark opens the report of a node that heard no answer to any of its
// checks for a while: its NoAnswer verdicts are not acted on.
const deafMark = "deaf"

// Report is a checking node's verdicts other than Holder, as its heartbeat
// carries them.
type Report struct {
	Entries map[netip.Addr]Entry
	// More counts the entries left out beyond maxEntries.
	More int
	// Heard: the node had an answer to one of its checks lately
	// (Schedule.Heard), so its NoAnswer verdicts may be acted on.
	Heard bool
}

// Format is the heartbeat annotation of r: "deaf" first when not Heard,
// then "ip=verdict/mac+mac@since" (since in Unix seconds) for the lowest
// maxEntries IPs, then "more=N"; comma separated. Empty when all is well.
func (r Report) Format() string {
	var parts []string
	if !r.Heard {
		parts = append(parts, deafMark)
	}
	ips := slices.SortedFunc(func(yield func(netip.Addr) bool) {
		for ip := range r.Entries {
			if !yield(ip) {
				return
			}
		}
	}, netip.Addr.Compare)
	more := r.More
	if len(ips) > maxEntries {
		more += len(ips) - maxEntries
		ips = ips[:maxEntries]
	}
	for _, ip := range ips {
		e := r.Entries[ip]
		p := ip.String() + "=" + e.Verdict.String()
		if len(e.MACs) > 0 {
			p += "/" + strings.Join(e.MACs, "+")
		}
		parts = append(parts, p+"@"+strconv.FormatInt(e.Since.Unix(), 10))
	}
	if more > 0 {
		parts = append(parts, "more="+strconv.Itoa(more))
	}
	return strings.Join(parts, ",")
}

// ParseReport reads Format. A malformed entry is an error naming it; the
// entries read so far are returned with it.
func ParseReport(s string) (Report, error) {
	r := Report{Heard: true}
	if s == "" {
		return r, nil
	}
	for _, f := range strings.Split(s, ",") {
		switch {
		case f == deafMark:
			r.Heard = false
			continue
		case strings.HasPrefix(f, "more="):
			n, err := strconv.Atoi(strings.TrimPrefix(f, "more="))
			if err != nil || n < 0 {
				return r, fmt.Errorf("wire report entry %q: bad count", f)
			}
			r.More = n
			continue
		}
		ip, e, err := parseEntry(f)
		if err != nil {
			return r, fmt.Errorf("wire report entry %q: %w", f, err)
		}
		if r.Entries == nil {
			r.Entries = map[netip.Addr]Entry{}
		}
		r.Entries[ip] = e
	}
	return r, nil
}

func parseEntry(f string) (netip.Addr, Entry, error) {
	ipText, rest, ok := strings.Cut(f, "=")
	if !ok {
		return netip.Addr{}, Entry{}, fmt.Errorf("no '='")
	}
	ip, err := netip.ParseAddr(ipText)
	if err != nil {
		return netip.Addr{}, Entry{}, err
	}
	rest, sinceText, ok := strings.Cut(rest, "@")
	if !ok {
		return netip.Addr{}, Entry{}, fmt.Errorf("no '@'")
	}
	secs, err := strconv.ParseInt(sinceText, 10, 64)
	if err != nil {
		return netip.Addr{}, Entry{}, fmt.Errorf("since: %w", err)
	}
	vText, macs, _ := strings.Cut(rest, "/")
	v, ok := ParseVerdict(vText)
	if !ok {
		return netip.Addr{}, Entry{}, fmt.Errorf("unknown verdict %q", vText)
	}
	e := Entry{Verdict: v, Since: time.Unix(secs, 0)}
	if macs != "" {
		for _, m := range strings.Split(macs, "+") {
			hw, err := net.ParseMAC(m)
			if err != nil {
				return netip.Addr{}, Entry{}, err
			}
			e.MACs = append(e.MACs, hw.String())
		}
	}
	return ip.Unmap(), e, nil
}
