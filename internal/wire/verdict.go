package wire

import (
	"slices"
)

// Verdict is what one check of an IP found on the wire.
type Verdict int

const (
	// Unchecked: no check has finished yet.
	Unchecked Verdict = iota
	// Holder: answered, and only by MACs of the node the lock names.
	Holder
	// NoAnswer: nobody answered, in Tries checks in a row.
	NoAnswer
	// Stranger: answered by one machine that is not the holder.
	Stranger
	// TwoMACs: answered by two machines or more.
	TwoMACs
)

var verdictNames = [...]string{"unchecked", "holder", "none", "stranger", "two-macs"}

func (v Verdict) String() string {
	if v < 0 || int(v) >= len(verdictNames) {
		return "unknown"
	}
	return verdictNames[v]
}

// ParseVerdict reads Verdict.String.
func ParseVerdict(s string) (Verdict, bool) {
	i := slices.Index(verdictNames[:], s)
	return Verdict(i), i >= 0
}

// Healthy: the IP is answered by its holder alone.
func (v Verdict) Healthy() bool { return v == Holder }

// Judge is the verdict on one check: holder is the holder's MACs (its
// heartbeat's), answered the distinct MACs that answered. A node with two
// interfaces on one LAN may answer from both; that is still its holder.
func Judge(holder, answered []string) Verdict {
	switch {
	case len(answered) == 0:
		return NoAnswer
	case len(answered) > 1 && !allOf(answered, holder):
		return TwoMACs
	case allOf(answered, holder):
		return Holder
	}
	return Stranger
}

func allOf(macs, of []string) bool {
	for _, m := range macs {
		if !slices.Contains(of, m) {
			return false
		}
	}
	return true
}
