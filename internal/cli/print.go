package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mattn/go-runewidth"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/yaml"
)

// Output formats of `status -o`.
const (
	outputTable = ""
	outputWide  = "wide"
	outputJSON  = "json"
	outputYAML  = "yaml"
)

// none marks an empty name or list in a table, as kubectl does.
const none = "<none>"

// printStatus writes st in format. Tables show ages relative to
// st.ObservedAt; json and yaml show times, never ages.
func printStatus(w io.Writer, st Status, format string) error {
	if format == outputJSON || format == outputYAML {
		return writeDoc(w, st, format)
	}
	var buf bytes.Buffer
	printTables(&buf, st, format == outputWide)
	_, err := w.Write(buf.Bytes())
	return err
}

// writeDoc writes doc as JSON or YAML, every control character escaped.
func writeDoc(w io.Writer, doc any, format string) error {
	switch format {
	case outputJSON:
		b, err := json.MarshalIndent(doc, "", "  ")
		if err != nil {
			return fmt.Errorf("encode json: %w", err)
		}
		_, err = fmt.Fprintf(w, "%s\n", escapeJSON(b))
		return err
	case outputYAML:
		// From json, as yaml.Marshal would, escaped: the YAML parser
		// refuses a raw DEL or C1 character, and its emitter escapes
		// every control character.
		b, err := json.Marshal(doc)
		if err == nil {
			b, err = yaml.JSONToYAML(escapeJSON(b))
		}
		if err != nil {
			return fmt.Errorf("encode yaml: %w", err)
		}
		_, err = w.Write(b)
		return err
	}
	return fmt.Errorf("unknown output format %q", format)
}

func printTables(w *bytes.Buffer, st Status, wide bool) {
	now := st.ObservedAt
	if len(st.IPs) == 0 {
		w.WriteString("No external IPs.\n")
	} else {
		header := []string{"IP", "SERVICES", "HOLDER", "INTERFACE", "STATE", "ALIVE", "AGE", "MOVES", "WIRE"}
		routed := routeMode(st)
		if routed {
			header = append(header, "ANNOUNCE")
		}
		nodes := make(map[string]*Node, len(st.Nodes))
		for i := range st.Nodes {
			nodes[st.Nodes[i].Name] = &st.Nodes[i]
		}
		strangers := slices.ContainsFunc(st.IPs, func(r IP) bool { return r.strangerMAC(nodes[r.Holder]) != "" })
		if strangers {
			header = append(header, "OTHER MAC")
		}
		if wide {
			header = append(header, "SUCCESSOR", "LOCK", "HEARTBEAT", "POLICY", "REASON")
		}
		heartbeat := map[string]*time.Time{}
		for _, n := range st.Nodes {
			heartbeat[n.Name] = n.LastRenewTime
		}
		rows := make([][]string, 0, len(st.IPs))
		for _, r := range st.IPs {
			row := []string{r.IP, orNone(strings.Join(r.Services, ",")), orNone(r.Holder), iface(r), string(r.State),
				yesNo(r.HolderAlive, r.Holder != ""), age(now, r.LastMoveTime), moves(r), wireCell(now, r.Wire)}
			if routed {
				row = append(row, orDash(r.Announce))
			}
			if strangers {
				row = append(row, orDash(r.strangerMAC(nodes[r.Holder])))
			}
			if wide {
				row = append(row, orDash(r.Successor), orDash(r.Lock), age(now, heartbeat[r.Holder]), orDash(st.Config.Policy), orDash(r.Reason))
			}
			rows = append(rows, row)
		}
		writeTable(w, header, rows)
	}
	if len(st.Nodes) > 0 {
		w.WriteString("\n")
		rows := make([][]string, 0, len(st.Nodes))
		for _, n := range st.Nodes {
			rows = append(rows, []string{n.Name, yesNo(n.Alive, true), age(now, n.LastRenewTime), yesNo(n.Eligible, n.heartbeat),
				strconv.Itoa(n.Holds), bound(n), orDash(n.message())})
		}
		writeTable(w, []string{"NODE", "ALIVE", "RENEWED", "ELIGIBLE", "HOLDS", "BOUND", "MESSAGE"}, rows)
	}
	var sessions [][]string
	for _, n := range st.Nodes {
		for _, s := range n.BGPSessions {
			sessions = append(sessions, []string{n.Name, s.Peer, s.State, age(now, s.Since)})
		}
	}
	if len(sessions) > 0 {
		w.WriteString("\n")
		writeTable(w, []string{"NODE", "BGP PEER", "STATE", "UPTIME"}, sessions)
	}
	notes := configNotes(st)
	if slices.ContainsFunc(st.IPs, func(r IP) bool {
		return r.ConflictMAC != "" || r.ClaimedBy != "" || len(r.Wire.MACs) > 0 && !r.answeredAlone()
	}) {
		notes = append(notes, "OTHER MAC: a machine that is not the holder answers for the IP (conflict: so it is not bound; bound: both answer, or only it). See docs/operating.md, Address conflicts.")
	}
	if slices.ContainsFunc(st.IPs, IP.wireTrouble) {
		notes = append(notes, "WIRE: what the IP's successor hears on the LAN (holder, none, stranger, two-macs, unchecked). See docs/operating.md, Checking the wire.")
	}
	if len(notes) > 0 {
		w.WriteString("\n")
		for _, n := range notes {
			w.WriteString(escapeControls(n) + "\n")
		}
	}
}

// routeMode: some IP is announced over BGP, so the tables say how each is.
func routeMode(st Status) bool {
	for _, r := range st.IPs {
		if r.Announce != "" && r.Announce != "arp" {
			return true
		}
	}
	return false
}

// configNotes are the lines below the tables: the ConfigMap's problems and
// eip Leases the plugin could not read.
func configNotes(st Status) []string {
	cm := st.Namespace + "/" + st.Config.Name
	var notes []string
	switch {
	case !st.Config.Found:
		notes = append(notes, "ConfigMap "+cm+" not found: no ranges are configured, so nothing is bound.")
	case st.Config.Error != "":
		notes = append(notes, "ConfigMap "+cm+" is invalid; the daemons keep their last good configuration:")
		for _, line := range strings.Split(st.Config.Error, "\n") {
			notes = append(notes, "  "+line)
		}
	case len(st.Config.Ranges) == 0:
		notes = append(notes, "ConfigMap "+cm+" configures no ranges, so nothing is bound.")
	}
	for _, w := range st.Config.Warnings {
		notes = append(notes, "Warning: ConfigMap "+cm+": "+w)
	}
	for _, w := range st.Warnings {
		notes = append(notes, "Warning: "+w)
	}
	return notes
}

// writeTable writes a kubectl-style table: no borders, left-aligned, three
// spaces between columns, no trailing blanks, control characters escaped in
// every cell. Widths are display widths.
// (A table library did the same at ten times the cost: 2 s of the plugin's
// CPU for 10,000 IPs.)
func writeTable(w *bytes.Buffer, header []string, rows [][]string) {
	cols := len(header)
	// Each cell's display width, measured once: header first, then rows.
	cells := make([]int, 0, (len(rows)+1)*cols)
	widths := make([]int, cols)
	measure := func(row []string) {
		for i := range cols {
			c := 0
			if i < len(row) {
				row[i] = escapeControls(row[i])
				c = displayWidth(row[i])
			}
			cells = append(cells, c)
			widths[i] = max(widths[i], c)
		}
	}
	measure(header)
	for _, r := range rows {
		measure(r)
	}
	// Room for every line as wide as the widest, in ASCII.
	line := 3*(cols-1) + 1
	for _, c := range widths {
		line += c
	}
	w.Grow((len(rows) + 1) * line)
	write := func(n int, row []string) {
		start := w.Len()
		for i, c := range row[:min(len(row), cols)] {
			w.WriteString(c)
			if i < cols-1 {
				for range widths[i] - cells[n*cols+i] + 3 {
					w.WriteByte(' ')
				}
			}
		}
		w.Truncate(start + len(bytes.TrimRight(w.Bytes()[start:], " ")))
		w.WriteByte('\n')
	}
	write(0, header)
	for n, r := range rows {
		write(n+1, r)
	}
}

// displayWidth is how many columns s takes on a terminal. Nearly every cell
// is printable ASCII, one column a byte, which runewidth would find out
// grapheme by grapheme.
func displayWidth(s string) int {
	for i := range len(s) {
		if s[i] < ' ' || s[i] > '~' {
			return runewidth.StringWidth(s)
		}
	}
	return len(s)
}

func iface(r IP) string {
	if r.Interface == "" {
		return "-"
	}
	return r.Interface + "/" + strconv.Itoa(r.PrefixLength)
}

func moves(r IP) string {
	if r.Lock == "" {
		return "-"
	}
	return strconv.Itoa(int(r.Moves))
}

func bound(n Node) string {
	if !n.heartbeat {
		return "-"
	}
	return strconv.Itoa(n.Bound)
}

// age is how long before now t was, as kubectl prints ages; "-" without t.
// A t after now (clocks apart) counts as now.
func age(now time.Time, t *time.Time) string {
	if t == nil {
		return "-"
	}
	return duration.HumanDuration(max(now.Sub(*t), 0))
}

func yesNo(b, applies bool) string {
	switch {
	case !applies:
		return "-"
	case b:
		return "yes"
	}
	return "no"
}

func orNone(s string) string {
	if s == "" {
		return none
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
