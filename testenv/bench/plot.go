package bench

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// The plot is a 2×2 grid of panels, written as SVG by hand.
const (
	panelW, panelH = 490.0, 330.0
	marginL        = 150.0 // room for row labels
	marginR        = 20.0
	marginT        = 40.0
	marginB        = 45.0
)

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"}

// Plot draws the report: failover times, move gaps, Lease requests per
// second against the number of IPs, and cold-start progress.
func (r *Report) Plot() []byte {
	var s svgWriter
	s.printf(`<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" viewBox="0 0 %g %g" font-family="sans-serif" font-size="11">`+"\n",
		2*panelW, 2*panelH+30, 2*panelW, 2*panelH+30)
	s.printf(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	s.text(10, 18, "start", "bold", fmt.Sprintf("eip benchmark, %s, %d nodes, %s", r.Started.Format("2006-01-02 15:04"), r.Nodes, r.Machine.CPU))

	var rows []stripRow
	for _, t := range r.Timings {
		for _, fault := range []string{FaultKill, FaultCut} {
			row := stripRow{label: fmt.Sprintf("%s, %s", fault, t.Name), target: (t.Lease + 500*time.Millisecond).Seconds()}
			for _, f := range r.Failover {
				if f.Timing == t.Name && f.Fault == fault && f.Error == "" {
					row.values = append(row.values, f.Failover.Seconds())
				}
			}
			if len(row.values) > 0 {
				rows = append(rows, row)
			}
		}
	}
	bgpFail, bgpMove := stripRow{label: "BGP, " + BGPFailover, target: (routedTiming.Lease + time.Second).Seconds()}, stripRow{label: "gap, BGP move", target: 100}
	for _, b := range r.BGP {
		switch {
		case b.Error != "":
		case b.Kind == BGPFailover:
			bgpFail.values = append(bgpFail.values, b.Answered.Seconds())
		default:
			bgpMove.values = append(bgpMove.values, millis(b.Gap))
		}
	}
	if len(bgpFail.values) > 0 {
		rows = append(rows, bgpFail)
	}
	s.strip(0, 30, "failover: fault → first reply from the new holder (s)", rows)

	rows = nil
	for _, kind := range []string{MoveRequest, MoveSIGTERM} {
		row := stripRow{label: "gap, " + kind, target: 100}
		for _, m := range r.Moves {
			if m.Kind == kind && m.Error == "" {
				row.values = append(row.values, millis(m.Gap))
			}
		}
		if len(row.values) > 0 {
			rows = append(rows, row)
		}
	}
	if len(bgpMove.values) > 0 {
		rows = append(rows, bgpMove)
	}
	var bind stripRow
	for _, b := range r.Bind {
		if b.Error == "" {
			bind.values = append(bind.values, millis(b.Latency))
		}
	}
	if len(bind.values) > 0 {
		bind.label, bind.target, bind.targetIsMedian = "Service → answering", 100, true
		rows = append(rows, bind)
	}
	s.strip(panelW, 30, "planned move gap and bind latency (ms)", rows)

	var writes, reads xySeries
	writes.label, reads.label = "writes/s", "reads/s"
	for _, res := range append(append([]ScaleResult(nil), r.Load...), r.Scale...) {
		if res.Steady.Window > 0 && res.CPUQuota == 0 {
			eipd := r.eipdRates(res.Steady)
			writes.points = append(writes.points, [2]float64{float64(res.IPs), eipd.Writes})
			reads.points = append(reads.points, [2]float64{float64(res.IPs), eipd.Reads})
		}
	}
	s.xy(0, panelH+30, xyPanel{
		title: "steady-state Lease requests/s by eipd (API server's count) vs IPs", xLabel: "IPs (log)", yLabel: "requests/s", logX: true,
		series: []xySeries{writes, reads}, hTarget: float64(r.Nodes) / defaultTiming.Renew.Seconds(), hTargetLabel: "target writes/s",
	})

	var cold []xySeries
	for _, res := range r.Scale {
		c := xySeries{label: fmt.Sprintf("%d IPs%s", res.IPs, res.quotaText())}
		for _, p := range res.Progress {
			c.points = append(c.points, [2]float64{p.T, 100 * float64(p.Bound) / float64(max(res.IPs, 1))})
		}
		if len(c.points) > 0 {
			cold = append(cold, c)
		}
	}
	s.xy(panelW, panelH+30, xyPanel{
		title: "cold start: % of IPs bound on node interfaces", xLabel: "seconds since eipd started", yLabel: "% bound",
		series: cold, vTarget: 10, vTargetLabel: "target (1,000 IPs)", noMarkers: true, yMax: 100,
	})
	s.printf("</svg>\n")
	return []byte(s.b.String())
}

type svgWriter struct{ b strings.Builder }

func (s *svgWriter) printf(format string, args ...any) { fmt.Fprintf(&s.b, format, args...) }

func (s *svgWriter) text(x, y float64, anchor, weight, text string) {
	s.printf(`<text x="%.1f" y="%.1f" text-anchor="%s" font-weight="%s">%s</text>`+"\n", x, y, anchor, weight, escape(text))
}

func escape(t string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(t)
}

// frame draws a panel's title and plot area and returns the area.
func (s *svgWriter) frame(x, y float64, title string) (x0, y0, w, h float64) {
	x0, y0 = x+marginL, y+marginT
	w, h = panelW-marginL-marginR, panelH-marginT-marginB
	s.text(x+panelW/2, y+22, "middle", "bold", title)
	s.printf(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#888"/>`+"\n", x0, y0, w, h)
	return x0, y0, w, h
}

// xTicks draws vertical grid lines and labels at ticks.
func (s *svgWriter) xTicks(x0, y0, w, h float64, ticks []float64, pos func(float64) float64) {
	for _, t := range ticks {
		px := pos(t)
		if px < x0-0.5 || px > x0+w+0.5 {
			continue
		}
		s.printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e4e4e4"/>`+"\n", px, y0, px, y0+h)
		s.text(px, y0+h+14, "middle", "normal", tickLabel(t))
	}
}

type stripRow struct {
	label          string
	values         []float64
	target         float64
	targetIsMedian bool
}

// strip draws one row of dots per group, with its median (black bar)
// and its target (red dashed bar).
func (s *svgWriter) strip(x, y float64, title string, rows []stripRow) {
	x0, y0, w, h := s.frame(x, y, title)
	if len(rows) == 0 {
		s.text(x0+w/2, y0+h/2, "middle", "normal", "not measured")
		return
	}
	hi := 0.0
	for _, r := range rows {
		hi = max(hi, r.target)
		for _, v := range r.values {
			hi = max(hi, v)
		}
	}
	ticks := niceTicks(0, hi*1.05)
	top := ticks[len(ticks)-1]
	pos := func(v float64) float64 { return x0 + w*v/top }
	s.xTicks(x0, y0, w, h, ticks, pos)
	rowH := h / float64(len(rows))
	for i, r := range rows {
		cy := y0 + rowH*(float64(i)+0.5)
		color := palette[i%len(palette)]
		s.text(x0-6, cy+4, "end", "normal", r.label)
		for j, v := range r.values {
			jitter := float64(j%7-3) * min(rowH/10, 4)
			s.printf(`<circle cx="%.1f" cy="%.1f" r="3" fill="%s" fill-opacity="0.6"/>`+"\n", pos(v), cy+jitter, color)
		}
		med := Summarize(r.values).Median
		s.printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black" stroke-width="2"/>`+"\n", pos(med), cy-rowH/3, pos(med), cy+rowH/3)
		s.printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="red" stroke-width="1.5" stroke-dasharray="4,3"/>`+"\n",
			pos(r.target), cy-rowH/2.2, pos(r.target), cy+rowH/2.2)
	}
	legend := "black: median; red dashed: target (p99; bind latency: median)"
	s.text(x0+w/2, y0+h+32, "middle", "normal", legend)
}

type xySeries struct {
	label  string
	points [][2]float64
}

type xyPanel struct {
	title, xLabel string
	yLabel        string
	logX          bool
	series        []xySeries
	hTarget       float64 // a horizontal target line; 0: none
	hTargetLabel  string
	vTarget       float64 // a vertical target line; 0: none
	vTargetLabel  string
	noMarkers     bool
	yMax          float64 // the top of the y axis; 0: fit the data
}

func (s *svgWriter) xy(x, y float64, p xyPanel) {
	x0, y0, w, h := s.frame(x, y, p.title)
	var xlo, xhi, yhi = math.Inf(1), math.Inf(-1), p.hTarget
	n := 0
	for _, sr := range p.series {
		for _, pt := range sr.points {
			xlo, xhi, yhi = min(xlo, pt[0]), max(xhi, pt[0]), max(yhi, pt[1])
			n++
		}
	}
	if n == 0 {
		s.text(x0+w/2, y0+h/2, "middle", "normal", "not measured")
		return
	}
	xhi = max(xhi, p.vTarget)
	var xticks []float64
	var xpos func(float64) float64
	if p.logX {
		lo, hi := math.Floor(math.Log10(max(xlo, 1))), math.Ceil(math.Log10(max(xhi, 10)))
		if hi <= lo {
			hi = lo + 1
		}
		for e := lo; e <= hi; e++ {
			xticks = append(xticks, math.Pow(10, e))
		}
		xpos = func(v float64) float64 { return x0 + w*(math.Log10(max(v, 1e-9))-lo)/(hi-lo) }
	} else {
		xticks = niceTicks(0, xhi*1.05)
		top := xticks[len(xticks)-1]
		xpos = func(v float64) float64 { return x0 + w*v/top }
	}
	top := max(yhi*1.1, 1)
	if p.yMax > 0 {
		top = p.yMax
	}
	yticks := niceTicks(0, top)
	ytop := yticks[len(yticks)-1]
	ypos := func(v float64) float64 { return y0 + h - h*v/ytop }
	s.xTicks(x0, y0, w, h, xticks, xpos)
	for _, t := range yticks {
		s.printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e4e4e4"/>`+"\n", x0, ypos(t), x0+w, ypos(t))
		s.text(x0-6, ypos(t)+4, "end", "normal", tickLabel(t))
	}
	s.text(x0+w/2, y0+h+32, "middle", "normal", p.xLabel)
	if p.hTarget > 0 {
		s.printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="red" stroke-dasharray="4,3"/>`+"\n", x0, ypos(p.hTarget), x0+w, ypos(p.hTarget))
		s.text(x0+w-4, ypos(p.hTarget)-4, "end", "normal", p.hTargetLabel)
	}
	if p.vTarget > 0 {
		s.printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="red" stroke-dasharray="4,3"/>`+"\n", xpos(p.vTarget), y0, xpos(p.vTarget), y0+h)
		s.text(xpos(p.vTarget)+4, y0+h-6, "start", "normal", p.vTargetLabel)
	}
	for i, sr := range p.series {
		color := palette[i%len(palette)]
		var pts []string
		for _, pt := range sr.points {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", xpos(pt[0]), ypos(pt[1])))
		}
		s.printf(`<polyline points="%s" fill="none" stroke="%s" stroke-width="1.5"/>`+"\n", strings.Join(pts, " "), color)
		if !p.noMarkers {
			for _, pt := range sr.points {
				s.printf(`<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", xpos(pt[0]), ypos(pt[1]), color)
			}
		}
		ly := y0 + 14 + 14*float64(i)
		s.printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"/>`+"\n", x0+8, ly-4, x0+24, ly-4, color)
		s.text(x0+28, ly, "start", "normal", sr.label)
	}
	// The y axis label sits left of the tick labels.
	s.printf(`<text x="%.1f" y="%.1f" text-anchor="middle" transform="rotate(-90 %.1f %.1f)">%s</text>`+"\n",
		x0-45, y0+h/2, x0-45, y0+h/2, escape(p.yLabel))
}

// niceTicks returns about five round tick values covering [lo, hi], the
// first at or below lo.
func niceTicks(lo, hi float64) []float64 {
	if hi <= lo {
		hi = lo + 1
	}
	raw := (hi - lo) / 5
	exp := math.Floor(math.Log10(raw))
	mult := 10.0
	for _, m := range []float64{1, 2, 2.5, 5} {
		if m*math.Pow(10, exp) >= raw {
			mult = m
			break
		}
	}
	// k·mult·10^exp, computed so that 3 × 0.2 prints as 0.6.
	tick := func(k float64) float64 {
		if exp < 0 {
			return k * mult / math.Pow(10, -exp)
		}
		return k * mult * math.Pow(10, exp)
	}
	var out []float64
	for k := math.Floor(lo / tick(1)); ; k++ {
		out = append(out, tick(k))
		if tick(k) >= hi-tick(1)*1e-9 {
			break
		}
	}
	return out
}

func tickLabel(v float64) string {
	if v >= 1000 && math.Mod(v, 1000) == 0 {
		return fmt.Sprintf("%gk", v/1000)
	}
	return fmt.Sprintf("%g", v)
}
