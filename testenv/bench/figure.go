package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Units of figures; values are stored in these units.
const (
	UnitSeconds  = "s"
	UnitMillis   = "ms"
	UnitMicros   = "µs"
	UnitPerSec   = "/s"
	UnitMiB      = "MiB"
	UnitPercent  = "%"
	UnitCount    = "count"
	UnitFraction = "x"
)

// Figure is one row of the table: a measured quantity, its samples and the
// target it is judged against.
type Figure struct {
	Name    string    `json:"name"`
	Unit    string    `json:"unit"`
	Samples []float64 `json:"samples"`
	Summary Summary   `json:"summary"`
	Target  Target    `json:"target"`
	// Note explains a figure that could not be measured, or how it was.
	Note string `json:"note,omitempty"`
}

// Target is an upper bound on one statistic of a figure. The zero Target
// means the figure is reported without a target.
type Target struct {
	// Stat is the judged statistic: "median", "p99" or "max".
	Stat  string  `json:"stat,omitempty"`
	Limit float64 `json:"limit"`
}

// NewFigure summarizes samples into a figure.
func NewFigure(name, unit string, samples []float64, target Target) Figure {
	return Figure{Name: name, Unit: unit, Samples: samples, Summary: Summarize(samples), Target: target}
}

// Missing is a figure that could not be measured, and why.
func Missing(name, unit string, target Target, why string) Figure {
	return Figure{Name: name, Unit: unit, Target: target, Note: why}
}

// Judged reports whether the figure has a target and samples to judge.
func (f Figure) Judged() bool { return f.Target.Stat != "" && f.Summary.N > 0 }

// Meets reports whether the judged statistic is within the target. A
// figure that is not judged meets nothing.
func (f Figure) Meets() bool {
	if !f.Judged() {
		return false
	}
	return f.stat(f.Target.Stat) <= f.Target.Limit
}

func (f Figure) stat(name string) float64 {
	switch name {
	case "median":
		return f.Summary.Median
	case "p99":
		return f.Summary.P99
	default:
		return f.Summary.Max
	}
}

func (f Figure) verdict() string {
	switch {
	case f.Target.Stat == "":
		return ""
	case f.Summary.N == 0:
		return "n/a"
	case f.Meets():
		return "yes"
	default:
		return "NO"
	}
}

func (f Figure) targetText() string {
	if f.Target.Stat == "" {
		return "-"
	}
	return f.Target.Stat + " ≤ " + formatValue(f.Target.Limit, f.Unit)
}

// formatValue prints v in unit with precision fit for reading.
func formatValue(v float64, unit string) string {
	switch unit {
	case UnitCount:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case UnitSeconds:
		return strconv.FormatFloat(v, 'f', 2, 64) + " s"
	case UnitMillis, UnitMicros:
		if math.Abs(v) >= 100 {
			return strconv.FormatFloat(v, 'f', 0, 64) + " " + unit
		}
		return strconv.FormatFloat(v, 'f', 1, 64) + " " + unit
	case UnitPerSec:
		return strconv.FormatFloat(v, 'f', 2, 64) + "/s"
	case UnitFraction:
		return strconv.FormatFloat(v, 'f', 2, 64) + "×"
	case "":
		return strconv.FormatFloat(v, 'g', 4, 64)
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + " " + unit
}

// WriteTable prints the figures as an aligned table: figure, samples,
// median, p99, target, and whether the target is met; notes follow the
// table, numbered, each once.
func WriteTable(w io.Writer, figs []Figure) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FIGURE\tN\tMEDIAN\tP99\tTARGET\tMEETS\t")
	var notes []string
	for _, f := range figs {
		med, p99 := "-", "-"
		if f.Summary.N > 0 {
			med, p99 = formatValue(f.Summary.Median, f.Unit), formatValue(f.Summary.P99, f.Unit)
		}
		name := f.Name
		if f.Note != "" {
			i := slices.Index(notes, f.Note)
			if i < 0 {
				notes = append(notes, f.Note)
				i = len(notes) - 1
			}
			name += fmt.Sprintf(" [%d]", i+1)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t\n", name, f.Summary.N, med, p99, f.targetText(), f.verdict())
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	for i, n := range notes {
		if _, err := fmt.Fprintf(w, "[%d] %s\n", i+1, strings.TrimSpace(n)); err != nil {
			return fmt.Errorf("write table: %w", err)
		}
	}
	return nil
}
