package testenv

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"
)

// Reply is one echo reply the client received.
type Reply struct {
	// At is when the reply was read.
	At time.Time
	// Seq is the sequence number of the request it answers (0, 1, …; not
	// wrapped at 65536).
	Seq int
	// MAC is the source address of the Ethernet frame: who answered.
	MAC net.HardwareAddr
	// RTT is the time from sending the request to reading this reply.
	RTT time.Duration
}

// ProbeResult is what a client pinging one address saw.
type ProbeResult struct {
	Target   netip.Addr
	Interval time.Duration
	// Start is when the first request was sent, End when probing stopped.
	Start, End time.Time
	// Sent is the number of requests sent; their sequence numbers are
	// 0 … Sent-1.
	Sent int
	// Replies in the order they arrived.
	Replies []Reply
}

// Gap is a time span without replies.
type Gap struct {
	From, To time.Time
}

// Duration is the length of the gap.
func (g Gap) Duration() time.Duration { return g.To.Sub(g.From) }

// LongestGap is the longest span without a reply, counting from Start to
// the first reply and from the last reply to End, so a target that never
// answered has a gap as long as the probe.
func (r ProbeResult) LongestGap() Gap {
	longest := Gap{From: r.Start, To: r.End}
	if len(r.Replies) == 0 {
		return longest
	}
	longest = Gap{From: r.Start, To: r.Replies[0].At}
	prev := r.Replies[0].At
	for _, rep := range r.Replies[1:] {
		if rep.At.Sub(prev) > longest.Duration() {
			longest = Gap{From: prev, To: rep.At}
		}
		prev = rep.At
	}
	if r.End.Sub(prev) > longest.Duration() {
		longest = Gap{From: prev, To: r.End}
	}
	return longest
}

// Lost is the number of requests no one answered.
func (r ProbeResult) Lost() int {
	answered := map[int]bool{}
	for _, rep := range r.Replies {
		answered[rep.Seq] = true
	}
	return r.Sent - len(answered)
}

// MACs lists the addresses that answered, in the order they first did.
func (r ProbeResult) MACs() []net.HardwareAddr {
	var macs []net.HardwareAddr
	seen := map[string]bool{}
	for _, rep := range r.Replies {
		if k := rep.MAC.String(); !seen[k] {
			seen[k] = true
			macs = append(macs, rep.MAC)
		}
	}
	return macs
}

// LastMAC is who sent the last reply, nil without replies.
func (r ProbeResult) LastMAC() net.HardwareAddr {
	if len(r.Replies) == 0 {
		return nil
	}
	return r.Replies[len(r.Replies)-1].MAC
}

// Overlap is a range of requests during which two MACs both answered.
type Overlap struct {
	MACs              [2]net.HardwareAddr
	FirstSeq, LastSeq int
	From, To          time.Time
}

func (o Overlap) String() string {
	return fmt.Sprintf("%s and %s both answered seq %d–%d (%s–%s)", o.MACs[0], o.MACs[1],
		o.FirstSeq, o.LastSeq, o.From.Format("15:04:05.000"), o.To.Format("15:04:05.000"))
}

// Overlaps reports every range of requests in which two different MACs both
// answered: the sequence numbers each MAC answered, from its first to its
// last, intersect. A clean move from one node to another has none; so has a
// gap. Two MACs answering one request, or answers alternating between
// nodes, show up. A probe expects each MAC's answers to form one run, so to
// check an address moving away and back, probe each move separately.
func (r ProbeResult) Overlaps() []Overlap {
	type span struct {
		mac         net.HardwareAddr
		first, last int
	}
	var spans []*span
	byMAC := map[string]*span{}
	for _, rep := range r.Replies {
		s := byMAC[rep.MAC.String()]
		if s == nil {
			s = &span{mac: rep.MAC, first: rep.Seq, last: rep.Seq}
			byMAC[rep.MAC.String()] = s
			spans = append(spans, s)
		}
		s.first = min(s.first, rep.Seq)
		s.last = max(s.last, rep.Seq)
	}
	var overlaps []Overlap
	for i, a := range spans {
		for _, b := range spans[i+1:] {
			lo, hi := max(a.first, b.first), min(a.last, b.last)
			if lo > hi {
				continue
			}
			o := Overlap{MACs: [2]net.HardwareAddr{a.mac, b.mac}, FirstSeq: lo, LastSeq: hi}
			for _, rep := range r.Replies {
				if rep.Seq < lo || rep.Seq > hi || !(bytes.Equal(rep.MAC, a.mac) || bytes.Equal(rep.MAC, b.mac)) {
					continue
				}
				if o.From.IsZero() || rep.At.Before(o.From) {
					o.From = rep.At
				}
				if rep.At.After(o.To) {
					o.To = rep.At
				}
			}
			overlaps = append(overlaps, o)
		}
	}
	return overlaps
}

// String summarises the result for a test log.
func (r ProbeResult) String() string {
	var macs []string
	for _, m := range r.MACs() {
		macs = append(macs, m.String())
	}
	return fmt.Sprintf("ping %s every %s for %s: %d sent, %d replies, %d lost, longest gap %s, MACs [%s], %d overlaps",
		r.Target, r.Interval, r.End.Sub(r.Start).Round(time.Millisecond), r.Sent, len(r.Replies), r.Lost(),
		r.LongestGap().Duration().Round(time.Millisecond), strings.Join(macs, " "), len(r.Overlaps()))
}
