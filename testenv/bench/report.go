package bench

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

// Figure names shared by the table and the plot.
const (
	nameTwoMACs     = "two MACs answering, any failover or move"
	nameDoubleBound = "IP bound on two nodes, any failover or move"
	nameUnanswered  = "IP answered by no node once the old holder returned, any failover"
)

// figures turns the samples into the rows of the table.
func (r *Report) figures() []Figure {
	var figs []Figure
	var twoMACs, doubleBound, unanswered []float64
	for _, t := range r.Timings {
		for _, fault := range []string{FaultKill, FaultCut} {
			var secs []float64
			var failed []string
			for _, s := range r.Failover {
				if s.Timing != t.Name || s.Fault != fault {
					continue
				}
				if s.Error != "" {
					failed = append(failed, s.Error)
					continue
				}
				secs = append(secs, s.Failover.Seconds())
				twoMACs = append(twoMACs, float64(s.TwoMACs+max(len(s.AnswerARP)-1, 0)))
				// The final ARP check wants exactly one answer: none is
				// an IP lost, as much a failure as two.
				if len(s.AnswerARP) == 0 {
					unanswered = append(unanswered, 1)
				} else {
					unanswered = append(unanswered, 0)
				}
				doubleBound = append(doubleBound, millis(s.DoubleBound))
			}
			if len(secs) == 0 && len(failed) == 0 {
				continue
			}
			f := NewFigure(fmt.Sprintf("failover, %s, %s", faultText(fault), t.Name), UnitSeconds, secs,
				Target{Stat: "p99", Limit: (t.Lease + 500*time.Millisecond).Seconds()})
			f.Note = failures(failed, len(secs))
			figs = append(figs, f)
		}
	}
	for _, kind := range []string{MoveRequest, MoveSIGTERM} {
		var gaps []float64
		var failed []string
		for _, s := range r.Moves {
			if s.Kind != kind {
				continue
			}
			if s.Error != "" {
				failed = append(failed, s.Error)
				continue
			}
			gaps = append(gaps, millis(s.Gap))
			twoMACs = append(twoMACs, float64(s.TwoMACs))
			doubleBound = append(doubleBound, millis(s.DoubleBound))
		}
		if len(gaps) == 0 && len(failed) == 0 {
			continue
		}
		name := "longest gap, holder SIGTERMed (lease 2s)"
		if kind == MoveRequest {
			name = "longest gap, planned move (lease 2s)"
		}
		f := NewFigure(name, UnitMillis, gaps, Target{Stat: "p99", Limit: 100})
		f.Note = failures(failed, len(gaps))
		if kind == MoveRequest && r.MoveMethod != "" {
			f.Note = joinNotes("requested with "+r.MoveMethod, f.Note)
		}
		figs = append(figs, f)
	}
	figs = append(figs, r.bgpFigures()...)
	if len(unanswered) > 0 {
		figs = append(figs, NewFigure(nameUnanswered, UnitCount, unanswered, Target{Stat: "max", Limit: 0}))
	}
	if len(twoMACs) > 0 {
		figs = append(figs,
			NewFigure(nameTwoMACs, UnitCount, twoMACs, Target{Stat: "max", Limit: 0}),
			NewFigure(nameDoubleBound, UnitMillis, doubleBound, Target{Stat: "max", Limit: 0}))
	}
	if len(r.Bind) > 0 {
		var ms []float64
		var failed []string
		for _, s := range r.Bind {
			if s.Error != "" {
				failed = append(failed, s.Error)
				continue
			}
			ms = append(ms, millis(s.Latency))
		}
		f := NewFigure("Service created → IP answering pings", UnitMillis, ms, Target{Stat: "median", Limit: 100})
		f.Note = failures(failed, len(ms))
		figs = append(figs, f)
	}
	for _, res := range append(append([]ScaleResult(nil), r.Load...), r.Scale...) {
		writes, reads := fmt.Sprintf("Lease writes/s by eipd, %d IPs%s", res.IPs, res.quotaText()), fmt.Sprintf("Lease reads/s by eipd, %d IPs%s", res.IPs, res.quotaText())
		target := r.writesTarget(res.Steady.Window)
		if res.Steady.Window == 0 {
			figs = append(figs, Missing(writes, UnitPerSec, target, res.Error))
			continue
		}
		eipd := r.eipdRates(res.Steady)
		w := NewFigure(writes, UnitPerSec, []float64{eipd.Writes}, target)
		w.Note = r.backgroundNote()
		figs = append(figs, w, NewFigure(reads, UnitPerSec, []float64{eipd.Reads}, Target{}))
	}
	for _, res := range r.Scale {
		coldTarget, rssTarget, cpuTarget, statusTarget := Target{}, Target{}, Target{}, Target{}
		if res.IPs <= 1000 && res.CPUQuota == 0 {
			coldTarget = Target{Stat: "max", Limit: 10}
			rssTarget = Target{Stat: "max", Limit: 64}
		}
		if res.IPs == 10000 && res.CPUQuota == 0 {
			rssTarget = Target{Stat: "max", Limit: 64}
			cpuTarget = Target{Stat: "max", Limit: 2}
			statusTarget = Target{Stat: "max", Limit: 0.5}
		}
		if lr := res.LeaseRate; lr != nil && lr.Best > 0 {
			figs = append(figs, NewFigure(fmt.Sprintf("API server's own Lease creates/s, %d Leases", res.IPs), UnitPerSec, []float64{lr.Best}, Target{}))
			if res.ColdStart > 0 {
				f := NewFigure(fmt.Sprintf("cold start ÷ (%d ÷ that rate)", res.IPs), UnitFraction,
					[]float64{res.ColdStart.Seconds() / (float64(res.IPs) / lr.Best)}, Target{Stat: "max", Limit: 1.25})
				f.Note = fmt.Sprintf("a plain client with %d parallel creators", lr.Creators)
				figs = append(figs, f)
			}
			if lr.AsEip > 0 {
				f := NewFigure(fmt.Sprintf("the same client's Lease creates/s as eip's ServiceAccount, in protobuf, %d Leases", res.IPs), UnitPerSec, []float64{lr.AsEip}, Target{})
				f.Note = "one more try each, as the cluster's admin in JSON and as eipd writes, with kube-apiserver's CPU profile of both (-profile)"
				figs = append(figs, f)
			}
		}
		figs = append(figs, loggedFigures(res)...)
		name := fmt.Sprintf("cold start → all %d IPs bound%s", res.IPs, res.quotaText())
		if res.ColdStart == 0 {
			figs = append(figs, Missing(name, UnitSeconds, coldTarget, res.Error))
			continue
		}
		figs = append(figs, NewFigure(name, UnitSeconds, []float64{res.ColdStart.Seconds()}, coldTarget))
		vanishedName := fmt.Sprintf("held addresses that vanished, %d IPs%s", res.IPs, res.quotaText())
		if res.Steady.Window == 0 {
			figs = append(figs, Missing(vanishedName, UnitCount, Target{Stat: "max", Limit: 0}, res.Error))
		} else {
			f := NewFigure(vanishedName, UnitCount, []float64{float64(res.Vanished)}, Target{Stat: "max", Limit: 0})
			f.Note = strings.Join(res.VanishedWhy, "; ")
			figs = append(figs, f)
		}
		figs = append(figs, eventFigures(res)...)
		if res.CPUQuota > 0 {
			continue // the figures below describe an unlimited eipd
		}
		if acc := res.ColdStartCPU; acc != nil {
			var cpu []float64
			for _, name := range slices.Sorted(maps.Keys(acc.Processes)) {
				if !isBedProcess(name) {
					cpu = append(cpu, acc.Processes[name].Seconds())
				}
			}
			figs = append(figs, NewFigure(fmt.Sprintf("eipd CPU time per node for that cold start, %d IPs", res.IPs), UnitSeconds, cpu, Target{}))
		}
		figs = append(figs, cpuFigures(res)...)
		if len(res.Daemons) == 0 {
			continue
		}
		var rss, cpu []float64
		for _, d := range res.Daemons {
			rss = append(rss, float64(d.PeakRSS)/(1<<20))
			cpu = append(cpu, d.CPU)
		}
		figs = append(figs,
			NewFigure(fmt.Sprintf("eipd peak RSS per node, %d IPs", res.IPs), UnitMiB, rss, rssTarget),
			NewFigure(fmt.Sprintf("eipd CPU per node, %d IPs, steady", res.IPs), UnitPercent, cpu, cpuTarget))
		figs = append(figs, massFailoverFigures(res, fmt.Sprintf("%d IPs on %d nodes", res.IPs, res.Nodes))...)
		statusName := fmt.Sprintf("kubectl eip status, %d IPs", res.IPs)
		if len(res.Status) == 0 {
			figs = append(figs, Missing(statusName, UnitSeconds, statusTarget, res.StatusNote))
			continue
		}
		figs = append(figs, NewFigure(statusName, UnitSeconds, seconds(res.Status), statusTarget))
		if len(res.StatusCPU) > 0 {
			figs = append(figs, NewFigure(statusName+": the plugin's CPU", UnitSeconds, seconds(res.StatusCPU), Target{}))
		}
		if len(res.StatusAPIServerCPU) > 0 {
			figs = append(figs, NewFigure(statusName+": kube-apiserver's CPU", UnitSeconds, seconds(res.StatusAPIServerCPU), Target{}))
		}
	}
	figs = append(figs, massStopFigures(r.MassStop)...)
	figs = append(figs, churnFigures(r.Churn)...)
	for _, res := range r.ByNodes {
		figs = append(figs, nodesFigures(res)...)
	}
	return append(figs, realNodeFigures(r.RealNodes)...)
}

// bgpFigures are the rows of the bgp scenario, if it ran: the routed
// client's wait after a holder was killed with its link cut, next to the
// router's hold timer, and its longest gap during a move.
func (r *Report) bgpFigures() []Figure {
	if len(r.BGP) == 0 {
		return nil
	}
	var answered, gaps, doubleBound []float64
	var failedFailovers, failedMoves []string
	stale := 0
	for _, s := range r.BGP {
		switch {
		case s.Kind == BGPFailover && s.Error != "":
			failedFailovers = append(failedFailovers, s.Error)
		case s.Kind == BGPFailover:
			answered = append(answered, s.Answered.Seconds())
			if s.StalePath {
				stale++
			}
		case s.Error != "":
			failedMoves = append(failedMoves, s.Error)
		default:
			gaps = append(gaps, millis(s.Gap))
			doubleBound = append(doubleBound, millis(s.DoubleBound))
		}
	}
	hold := r.RouterHoldTime
	fail := NewFigure(fmt.Sprintf("BGP failover, %s, %s: routed client answered again", BGPFailover, routedTiming.Name), UnitSeconds, answered,
		Target{Stat: "p99", Limit: (routedTiming.Lease + time.Second).Seconds()})
	fail.Note = joinNotes(fmt.Sprintf("the dead holder's route was still at the router, its session waiting for the %s hold timer, in %d of %d samples",
		hold, stale, len(answered)), failures(failedFailovers, len(answered)))
	timer := NewFigure("BGP router hold timer: a failover that waits for it", UnitSeconds, []float64{hold.Seconds()}, Target{})
	timer.Note = "how the BGP modes of the peers fail over a dead speaker without BFD: not measured, the hold time the router proposes"
	move := NewFigure(fmt.Sprintf("BGP longest gap, planned move (%s)", routedTiming.Name), UnitMillis, gaps, Target{Stat: "p99", Limit: 100})
	move.Note = failures(failedMoves, len(gaps))
	if r.MoveMethod != "" {
		move.Note = joinNotes("requested with "+r.MoveMethod, move.Note)
	}
	double := NewFigure("BGP planned move: IP on two nodes", UnitMillis, doubleBound, Target{Stat: "max", Limit: 0})
	return []Figure{fail, timer, move, double}
}

// cpuFigures say what limits the cold start's ratio to the plain client's
// creates: where the cores' time went in each, what the API server and
// etcd spent per Lease, and the ratio their CPU alone would give, if the
// eipds ran on other machines as they do in a real cluster.
func cpuFigures(res ScaleResult) []Figure {
	if res.LeaseRate == nil || res.ColdStartCPU == nil {
		return nil
	}
	plain, ok := res.LeaseRate.BestCPU()
	if !ok {
		return nil
	}
	cold := *res.ColdStartCPU
	n := float64(res.IPs)
	var figs []Figure
	for _, phase := range []struct {
		what string
		acc  CPUAccount
	}{
		{fmt.Sprintf("the plain client's %d creates", res.IPs), plain},
		{fmt.Sprintf("eip's cold start of %d IPs", res.IPs), cold},
	} {
		busy := NewFigure("cores busy, "+phase.what, UnitPercent, []float64{phase.acc.Share(phase.acc.Busy)}, Target{})
		busy.Note = phase.acc.Breakdown()
		figs = append(figs, busy,
			NewFigure("kube-apiserver CPU per Lease, "+phase.what, UnitMicros, []float64{micros(phase.acc.Processes[procAPIServer]) / n}, Target{}),
			NewFigure("etcd CPU per Lease, "+phase.what, UnitMicros, []float64{micros(phase.acc.Processes[procEtcd]) / n}, Target{}))
	}
	if as := res.LeaseRate.AsEipCPU; as != nil {
		figs = append(figs, NewFigure(fmt.Sprintf("kube-apiserver CPU per Lease, the plain client's %d creates as eip's ServiceAccount", res.IPs), UnitMicros,
			[]float64{micros(as.Processes[procAPIServer]) / n}, Target{}))
	}
	if plain.ControlPlane() > 0 {
		f := NewFigure(fmt.Sprintf("cold start ÷ (%d ÷ that rate), by the control plane's CPU alone", res.IPs), UnitFraction,
			[]float64{float64(cold.ControlPlane()) / float64(plain.ControlPlane())}, Target{})
		f.Note = "kube-apiserver's and etcd's CPU for eip's cold start ÷ theirs for the plain client's creates: the ratio if they had the cores as they did for the plain client, the eipds on other machines"
		figs = append(figs, f)
	}
	return figs
}

// massFailoverFigures are the rows of one mass failover, if it ran.
func massFailoverFigures(res ScaleResult, what string) []Figure {
	m := res.MassFailover
	if m == nil {
		return nil
	}
	limit := Target{Stat: "p99", Limit: (defaultTiming.Lease + time.Second).Seconds()}
	bound := NewFigure(fmt.Sprintf("mass failover, %s: each of %s's %d IPs on a survivor", what, m.Node, m.IPs), UnitSeconds, m.Bound, limit)
	bound.Note = joinNotes(fmt.Sprintf("SIGKILL and link cut; %d never bound again, %d Lease conflicts", m.Missing, m.Conflicts), m.Error)
	answered := NewFigure(fmt.Sprintf("mass failover, %s: pinged IPs answered by a survivor", what), UnitSeconds, m.Answered, limit)
	twice := NewFigure(fmt.Sprintf("mass failover, %s: IPs answered by two MACs or bound on two live nodes", what), UnitCount,
		[]float64{float64(m.TwoMACs + m.DoubleBound)}, Target{Stat: "max", Limit: 0})
	return []Figure{bound, answered, twice}
}

// massStopFigures are the rows of the stop scenario, if it ran: each IP's
// gap from the stopped node to a survivor, and the IPs not handed off or
// bound twice.
func massStopFigures(m *MassStop) []Figure {
	if m == nil {
		return nil
	}
	what := fmt.Sprintf("graceful stop (SIGTERM) of %s holding %d IPs", m.Node, m.IPs)
	ms := make([]float64, len(m.Gap))
	for i, s := range m.Gap {
		ms[i] = s * 1000
	}
	gap := NewFigure(what+": each IP's gap, stopped node → survivor", UnitMillis, ms, Target{Stat: "p99", Limit: 100})
	gap.Note = joinNotes(fmt.Sprintf("eipd exited %.1f s after the SIGTERM", m.Exited.Seconds()), m.Error)
	return []Figure{
		gap,
		NewFigure(fmt.Sprintf("%s: IPs not handed off (dark, or a gap beyond ±%s)", what, handOff), UnitCount, []float64{float64(m.NotHandedOff)}, Target{Stat: "max", Limit: 0}),
		NewFigure(what+": IPs bound on two nodes at once", UnitCount, []float64{float64(m.DoubleBound)}, Target{Stat: "max", Limit: 0}),
	}
}

// nodesFigures are the rows of one node count of the nodes scenario.
func nodesFigures(res ScaleResult) []Figure {
	what := fmt.Sprintf("%d nodes, %d IPs", res.Nodes, res.IPs)
	if res.SteadyAPI.Window == 0 {
		return []Figure{Missing("API server writes/s, "+what, UnitPerSec, Target{}, res.Error)}
	}
	writesTarget, cpuTarget := Target{}, Target{}
	if res.Nodes == 50 {
		writesTarget, cpuTarget = Target{Stat: "max", Limit: 100}, Target{Stat: "max", Limit: 10}
	}
	var rss, cpu, held []float64
	for _, d := range res.Daemons {
		rss = append(rss, float64(d.PeakRSS)/(1<<20))
		cpu = append(cpu, d.CPU)
		held = append(held, float64(d.Bound))
	}
	w := NewFigure("API server writes/s (every resource), "+what, UnitPerSec, []float64{res.SteadyAPI.Writes}, writesTarget)
	w.Note = "includes the API server's own (about 0.1/s)"
	figs := []Figure{
		w,
		NewFigure("API server watch events sent/s, "+what, UnitPerSec, []float64{res.SteadyAPI.Events}, Target{}),
		NewFigure("API server CPU, "+what, UnitPercent, []float64{res.SteadyAPI.CPU}, cpuTarget),
		NewFigure("eipd CPU per node, steady, "+what, UnitPercent, cpu, Target{}),
		NewFigure("eipd peak RSS per node, "+what, UnitMiB, rss, Target{}),
		NewFigure("IPs held per node at the window's end, "+what, UnitCount, held, Target{}),
	}
	if res.MassFailover != nil {
		figs = append(figs, massFailoverFigures(res, what)...)
	}
	return figs
}

// writesTarget is the design's bound on steady-state writes (docs/design.md,
// Leases: heartbeats and locks), one heartbeat
// renewal per node per renew interval, plus one renewal per node per
// window: a window sees one more renewal of a node than its length
// predicts when it starts just before one and ends just after another.
func (r *Report) writesTarget(window time.Duration) Target {
	limit := float64(r.Nodes) / defaultTiming.Renew.Seconds()
	if window > 0 {
		limit += float64(r.Nodes) / window.Seconds()
	}
	return Target{Stat: "max", Limit: limit}
}

// eipdRates are the API server's counts less its own background traffic.
func (r *Report) eipdRates(total Rates) Rates {
	out := total
	if r.Background != nil {
		out.Writes = max(0, total.Writes-r.Background.Writes)
		out.Reads = max(0, total.Reads-r.Background.Reads)
	}
	return out
}

func (r *Report) backgroundNote() string {
	if r.Background == nil {
		return "the API server's apiserver_request_total, its own identity Lease included (not measured)"
	}
	return fmt.Sprintf("apiserver_request_total{resource=leases} deltas less the API server's own Lease traffic with no eipd (%.2f writes/s, %.2f reads/s)",
		r.Background.Writes, r.Background.Reads)
}

func faultText(fault string) string {
	if fault == FaultKill {
		return "eipd SIGKILLed"
	}
	return "holder's link cut"
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// failures notes the failed repetitions of a figure, with the first error.
func failures(errs []string, ok int) string {
	if len(errs) == 0 {
		return ""
	}
	return fmt.Sprintf("%d of %d repetitions failed, first: %s", len(errs), len(errs)+ok, errs[0])
}

func joinNotes(a, b string) string {
	if b == "" {
		return a
	}
	return a + "; " + b
}

// WriteTable prints the figures, then the run's errors and context.
func (r *Report) WriteTable(w io.Writer) error {
	if err := WriteTable(w, r.Figures); err != nil {
		return err
	}
	m := r.Machine
	var extra string
	for _, k := range slices.Sorted(maps.Keys(r.Config)) {
		extra += fmt.Sprintf("; %s: %s", k, r.Config[k])
	}
	_, err := fmt.Fprintf(w, "\n%d nodes; %s, %d CPUs, %d MiB, %s, %s; load %s → %s; took %s%s\n",
		r.Nodes, m.CPU, m.CPUs, m.MemoryMiB, m.Kernel, m.GoVersion, m.LoadStart, m.LoadEnd, r.Took.Round(time.Second), extra)
	if r.PluginNote != "" && err == nil {
		_, err = fmt.Fprintf(w, "kubectl eip not used: %s\n", r.PluginNote)
	}
	for _, e := range r.Errors {
		if err == nil {
			_, err = fmt.Fprintf(w, "error: %s\n", e)
		}
	}
	return err
}

// quotaText names a CPU-starved run in figure names.
func (res ScaleResult) quotaText() string {
	if res.CPUQuota == 0 {
		return ""
	}
	return fmt.Sprintf(", eipd limited to %g %% of a core", res.CPUQuota)
}

// loggedFigures are what the eipds of a scale run logged that moves IPs,
// per node: in a scale run nothing should.
func loggedFigures(res ScaleResult) []Figure {
	if len(res.Logged) == 0 {
		return nil
	}
	var unheard, unbound []float64
	for _, c := range res.Logged {
		unheard = append(unheard, float64(c.Unheard))
		unbound = append(unbound, float64(c.Unbound))
	}
	return []Figure{
		NewFigure(fmt.Sprintf("reported unheard over the LAN, per node, %d IPs%s", res.IPs, res.quotaText()), UnitCount, unheard, Target{Stat: "max", Limit: 0}),
		NewFigure(fmt.Sprintf("IPs unbound by their eipd, per node, %d IPs%s", res.IPs, res.quotaText()), UnitCount, unbound, Target{}),
	}
}

// eventFigures are the Events each eipd posted in a scale run: on
// Services, within the budget a node has over the run's time (eventBudget
// at once and one more each second, for each of the two types), and
// summarised on its Node.
func eventFigures(res ScaleResult) []Figure {
	if len(res.Events) == 0 {
		return nil
	}
	var posted, left []float64
	summaries := 0
	for _, c := range res.Events {
		posted = append(posted, float64(c.OnServices))
		left = append(left, float64(c.Summarised))
		summaries += c.Summaries
	}
	budget := Target{Stat: "max", Limit: 2 * (float64(eventBudget) + res.EventsFor.Truncate(time.Second).Seconds())}
	p := NewFigure(fmt.Sprintf("Events eipd posted on Services per node, %d IPs%s", res.IPs, res.quotaText()), UnitCount, posted, budget)
	p.Note = fmt.Sprintf("from the cold start to the end of the window (%s); the budget allows %d of each type, Normal and Warning, and one more a second", res.EventsFor.Round(time.Second), eventBudget)
	s := NewFigure(fmt.Sprintf("Events summarised on the Node per node, %d IPs%s", res.IPs, res.quotaText()), UnitCount, left, Target{})
	s.Note = fmt.Sprintf("said in %d EventsSummarised Events", summaries)
	return []Figure{p, s}
}

// seconds is ds in seconds.
func seconds(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = d.Seconds()
	}
	return out
}
