package cli

import (
	"bytes"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/eip-project/eip/internal/config"
	"github.com/eip-project/eip/internal/ipset"
)

// RangeReport is what `kubectl eip status --ranges` reports: how full each
// range is. Its JSON form is documented in docs/status-schema.md beside
// Status, under the same schema version.
type RangeReport struct {
	SchemaVersion int       `json:"schemaVersion"`
	Namespace     string    `json:"namespace"`
	ObservedAt    time.Time `json:"observedAt"`
	Config        Config    `json:"config"`
	// Ranges are in the order of addresses (IPv4 first); empty while the
	// ConfigMap is invalid, its ranges then being unknown to the plugin.
	Ranges []RangeUse `json:"ranges"`
}

// RangeUse is one line of the ranges key and how its addresses are used.
// Capacity = Reserved + Allocated + Free; IPv6 counts saturate at
// 18446744073709551615 (a /64 or more).
type RangeUse struct {
	// Name is the range's name option; "" when it has none.
	Name string `json:"name"`
	// Addresses is the CIDR, the first-last span or the single address.
	Addresses string `json:"addresses"`
	// Family is IPv4 or IPv6.
	Family   string `json:"family"`
	Capacity uint64 `json:"capacity"`
	// Allocated: named by a Service and served by eip; Bound: those of
	// them whose holder is alive and binds them (states bound and moving).
	Allocated uint64 `json:"allocated"`
	Bound     uint64 `json:"bound"`
	Free      uint64 `json:"free"`
	// Reserved: never bound, as the network and broadcast addresses of an
	// IPv4 CIDR and the nodes' and the API server's own addresses.
	Reserved uint64 `json:"reserved"`
	// Namespaces may use the range; empty means every namespace.
	Namespaces []string `json:"namespaces"`
	AutoAssign bool     `json:"autoAssign"`
	// Announce is arp, bgp or both.
	Announce string `json:"announce"`
}

// rangeUses describes cfg's ranges: entries are the IPs Services name
// within them, rows the status rows, which say which IPs are bound.
func rangeUses(cfg config.Config, entries []ipset.Entry, reserved map[netip.Addr]string, rows []IP) []RangeUse {
	bound := make(map[netip.Addr]bool, len(rows))
	for _, r := range rows {
		bound[r.addr] = r.State == StateBound || r.State == StateMoving
	}
	uses := ipset.RangeUsage(cfg, slices.Values(entries), reserved, func(ip netip.Addr) bool { return bound[ip] })
	out := make([]RangeUse, 0, len(uses))
	for _, u := range uses {
		r := u.Range
		family := "IPv4"
		if r.First.Is6() {
			family = "IPv6"
		}
		ns := r.Namespaces
		if ns == nil {
			ns = []string{}
		}
		out = append(out, RangeUse{Name: r.Name, Addresses: r.Addresses(), Family: family,
			Capacity: u.Capacity, Allocated: u.Allocated, Bound: u.Bound, Free: u.Free, Reserved: u.Reserved,
			Namespaces: ns, AutoAssign: r.AutoAssign, Announce: r.Announce.String()})
	}
	return out
}

// rangeReport is the part of st that --ranges prints.
func rangeReport(st Status) RangeReport {
	rep := RangeReport{SchemaVersion: st.SchemaVersion, Namespace: st.Namespace, ObservedAt: st.ObservedAt,
		Config: st.Config, Ranges: st.ranges}
	if rep.Ranges == nil {
		rep.Ranges = []RangeUse{}
	}
	return rep
}

// printRanges writes the report in format; the table is the same with or
// without wide.
func printRanges(w io.Writer, rep RangeReport, format string) error {
	if format == outputJSON || format == outputYAML {
		return writeDoc(w, rep, format)
	}
	var buf bytes.Buffer
	if len(rep.Ranges) == 0 {
		buf.WriteString("No ranges.\n")
	} else {
		rows := make([][]string, 0, len(rep.Ranges))
		for _, r := range rep.Ranges {
			rows = append(rows, []string{orDash(r.Name), r.Addresses, r.Family,
				count(r.Capacity), count(r.Allocated), count(r.Bound), count(r.Free), count(r.Reserved),
				orAll(r.Namespaces), yesNo(r.AutoAssign, true), r.Announce})
		}
		writeTable(&buf, []string{"NAME", "RANGE", "FAMILY", "CAPACITY", "ALLOCATED", "BOUND", "FREE", "RESERVED", "NAMESPACES", "AUTO-ASSIGN", "ANNOUNCE"}, rows)
	}
	if notes := configNotes(Status{Namespace: rep.Namespace, Config: rep.Config}); len(notes) > 0 {
		buf.WriteString("\n")
		for _, n := range notes {
			buf.WriteString(escapeControls(n) + "\n")
		}
	}
	_, err := w.Write(buf.Bytes())
	return err
}

func count(n uint64) string { return strconv.FormatUint(n, 10) }

func orAll(namespaces []string) string {
	if len(namespaces) == 0 {
		return "*"
	}
	return strings.Join(namespaces, ",")
}
