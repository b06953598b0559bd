package cli

import (
	"slices"
	"time"

	"github.com/eip-project/eip/internal/lease"
	"github.com/eip-project/eip/internal/wire"
)

// Wire is what the LAN says of a bound IP: the last verdict of the node
// that checks it from outside, its successor (docs/design.md, Checking
// the wire).
type Wire struct {
	// Verdict is holder (answered by its holder alone), none (nobody
	// answered, in several checks), stranger (one machine that is not
	// the holder answered), two-macs (two machines answered) or
	// unchecked (no node checks it: it has no live successor, or its
	// successor has not checked it yet).
	Verdict string `json:"verdict"`
	// By is the node that checked; "" when none.
	By string `json:"by"`
	// Since is when a verdict other than holder began, on the checking
	// node's clock; CheckedAt a time since which the checking node checked
	// the IP (a holder verdict). null when unknown.
	Since     *time.Time `json:"since"`
	CheckedAt *time.Time `json:"checkedAt"`
	// MACs answered, for a verdict other than holder; [] otherwise.
	MACs []string `json:"macs"`
	// Deaf: the checking node heard no answer to any of its checks for a
	// while, so it may be the one cut off: its none is not acted on.
	Deaf bool `json:"deaf"`
}

// wireReport is what a node's heartbeat says of the wire.
type wireReport struct {
	report  wire.Report
	checked time.Time
	ok      bool // the node checks the wire (an eipd that knows how)
}

func readWire(hb lease.Heartbeat) wireReport {
	r, _ := wire.ParseReport(hb.Wire) // a damaged entry is left out; the rest still counts
	return wireReport{report: r, checked: hb.WireChecked, ok: !hb.WireChecked.IsZero() || hb.Wire != ""}
}

// fillWire adds the wire's verdict to a bound IP, from its successor's
// heartbeat.
func (r *IP) fillWire(nodes map[string]*Node) {
	r.Wire = Wire{MACs: []string{}}
	if r.State != StateBound {
		return
	}
	r.Wire.Verdict = wire.Unchecked.String()
	checker := nodes[r.Successor]
	if checker == nil || !checker.Alive || !checker.wire.ok || r.Successor == r.Holder {
		return
	}
	w := &r.Wire
	w.By, w.Deaf = checker.Name, !checker.wire.report.Heard
	if e, ok := checker.wire.report.Entries[r.addr]; ok {
		since := e.Since.UTC()
		w.Verdict, w.Since = e.Verdict.String(), &since
		w.MACs = append(w.MACs, e.MACs...)
		return
	}
	if checker.wire.report.More > 0 || checker.wire.checked.IsZero() {
		return // left out of a full report, or not checked yet: unknown
	}
	at := checker.wire.checked.UTC()
	w.Verdict, w.CheckedAt = wire.Holder.String(), &at
}

// answeredAlone: the wire says the IP is answered by its holder alone.
func (r IP) answeredAlone() bool { return r.Wire.Verdict == wire.Holder.String() }

// wireTrouble: the wire says the IP is not answered by its holder alone.
func (r IP) wireTrouble() bool {
	return r.Wire.Verdict != "" && r.Wire.Verdict != wire.Holder.String() && r.Wire.Verdict != wire.Unchecked.String()
}

// strangerMAC is a MAC other than the holder's that answers for the IP,
// from the holder's own report or the wire's; "" when none.
func (r IP) strangerMAC(holder *Node) string {
	switch {
	case r.ConflictMAC != "":
		return r.ConflictMAC
	case r.ClaimedBy != "":
		return r.ClaimedBy
	}
	for _, m := range r.Wire.MACs {
		if holder == nil || !slices.Contains(holder.MACs, m) {
			return m
		}
	}
	return ""
}

// wireCell is the WIRE column: the verdict, by whom and how long ago.
func wireCell(now time.Time, w Wire) string {
	if w.Verdict == "" {
		return "-"
	}
	if w.By == "" {
		return w.Verdict
	}
	t := w.Since
	if t == nil {
		t = w.CheckedAt
	}
	s := w.Verdict + " (" + w.By
	if t != nil {
		s += ", " + age(now, t)
	}
	if w.Deaf {
		s += ", deaf"
	}
	return s + ")"
}
