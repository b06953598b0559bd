package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/eip-project/eip/testenv"
)

// Scenarios, for Options.Only.
const (
	ScenarioFailover = "failover"
	ScenarioMove     = "move"
	ScenarioBind     = "bind"
	ScenarioLoad     = "load"
	ScenarioScale    = "scale"
	ScenarioStop     = "stop"
	ScenarioChurn    = "churn"
	ScenarioNodes    = "nodes"
	// ScenarioBGP needs the testenv router (testenv.Options.Router).
	ScenarioBGP = "bgp"
	// ScenarioRealNodes runs on a cluster of its own: real kubelet nodes
	// with eip installed from manifests/.
	ScenarioRealNodes = "realnodes"
)

// Scenarios lists every scenario in the order Run runs them.
func Scenarios() []string {
	return []string{ScenarioFailover, ScenarioMove, ScenarioBGP, ScenarioBind, ScenarioLoad, ScenarioScale, ScenarioStop, ScenarioChurn, ScenarioNodes, ScenarioRealNodes}
}

// Options configure Run.
type Options struct {
	// Cluster is a started testenv cluster with its nodes idle; Run
	// starts and stops eipd on them as it goes. Every scenario but nodes
	// uses its first three nodes; nodes needs as many as NodeCounts says.
	Cluster *testenv.Cluster
	Log     *slog.Logger
	// Only lists the scenarios to run (default: all of Scenarios).
	Only []string
	// Reps is the number of failovers per fault and lease (default 20),
	// MoveReps of moves and of SIGTERMs (default 20), BindReps of Services
	// created (default 20), BGPReps of route-mode failovers and of
	// route-mode moves (default 20).
	Reps, MoveReps, BindReps, BGPReps int
	// LoadIPs are the IP counts whose steady-state Lease requests are
	// measured (default 10, 100); ScaleIPs those that are also timed from a
	// cold start and whose daemons' memory and CPU are measured (default
	// 1000). Each counts toward requests per IP count.
	LoadIPs, ScaleIPs []int
	// Faults are the faults each failover repetition alternates between
	// (default FaultKill and FaultCut); Leases the lease durations of
	// defaultTiming and tunedTiming it runs them at (default both).
	Faults []string
	Leases []time.Duration
	// StopIPs is how many IPs the node stopped gracefully in the stop
	// scenario holds (default 5000); ChurnIPs how many IPs the churn
	// scenario runs with (default 1000).
	StopIPs, ChurnIPs int
	// RealNodeReps is the number of rollout restarts and of holder pod
	// deletions on real nodes (default 5).
	RealNodeReps int
	// NodeCounts are the numbers of nodes the nodes scenario runs eipd on
	// (default 10, 25, 50), each with NodeIPs IPs (default 1000).
	NodeCounts []int
	NodeIPs    int
	// Window is each steady-state window (default 30 s), Settle the wait
	// before it once everything is bound (default 5 s).
	Window, Settle time.Duration
	// EipdArgs are extra eipd flags.
	EipdArgs []string
	// Config are extra keys of eip-config, over each scenario's timing
	// (liveness-port: off, say).
	Config map[string]string
	// KubectlEip is the plugin binary, for kubectl eip status and move.
	KubectlEip string
	// StarvedQuota, when above 0, runs each scale a second time with every
	// eipd limited to that share of one core, in percent.
	StarvedQuota float64
	// StarvedOnly skips each scale's run without a CPU limit (and with it
	// the API server's create rate, the mass failover and kubectl eip
	// status, which only that run measures).
	StarvedOnly bool
	// ProfileDir, when set, receives CPU and heap profiles of one eipd at
	// each scale (eipd must run with --pprof).
	ProfileDir string
	// Measured, when set, is given the report so far, figures included,
	// each time a scenario, or one IP or node count of one, is done: a
	// run cut short keeps what it measured.
	Measured func(*Report)
}

func (o *Options) setDefaults() {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if len(o.Only) == 0 {
		o.Only = Scenarios()
	}
	for _, v := range []*int{&o.Reps, &o.MoveReps, &o.BindReps, &o.BGPReps} {
		if *v <= 0 {
			*v = 20
		}
	}
	if len(o.Faults) == 0 {
		o.Faults = []string{FaultKill, FaultCut}
	}
	if len(o.Leases) == 0 {
		o.Leases = []time.Duration{defaultTiming.Lease, tunedTiming.Lease}
	}
	if o.ChurnIPs <= 0 {
		o.ChurnIPs = 1000
	}
	if o.StopIPs <= 0 {
		o.StopIPs = 5000
	}
	if o.RealNodeReps <= 0 {
		o.RealNodeReps = 5
	}
	if o.LoadIPs == nil {
		o.LoadIPs = []int{10, 100}
	}
	if o.ScaleIPs == nil {
		o.ScaleIPs = []int{1000}
	}
	if o.NodeCounts == nil {
		o.NodeCounts = []int{10, 25, 50}
	}
	if o.NodeIPs <= 0 {
		o.NodeIPs = 1000
	}
	if o.Window <= 0 {
		o.Window = 30 * time.Second
	}
	if o.Settle <= 0 {
		o.Settle = 5 * time.Second
	}
}

// Report is everything one run measured.
type Report struct {
	Machine Machine       `json:"machine"`
	Started time.Time     `json:"started"`
	Took    time.Duration `json:"took"`
	Nodes   int           `json:"nodes"`
	Timings []Timing      `json:"timings"`
	// Config are the extra eip-config keys of the run (Options.Config).
	Config   map[string]string `json:"config,omitempty"`
	Figures  []Figure          `json:"figures"`
	Failover []FailoverSample  `json:"failover,omitempty"`
	Moves    []MoveSample      `json:"moves,omitempty"`
	// BGP are the route-mode samples; RouterHoldTime is the hold time the
	// router proposes to the nodes, after which it would drop a dead
	// holder's route by itself.
	BGP            []BGPSample   `json:"bgp,omitempty"`
	RouterHoldTime time.Duration `json:"routerHoldTime,omitempty"`
	Bind           []BindSample  `json:"bind,omitempty"`
	Load           []ScaleResult `json:"load,omitempty"`
	// Background is the API server's Lease traffic with no eipd running:
	// its own identity Lease. The figures for eipd subtract it.
	Background *Rates        `json:"background,omitempty"`
	Scale      []ScaleResult `json:"scale,omitempty"`
	// ByNodes are the nodes scenario's runs, one per node count.
	ByNodes []ScaleResult `json:"byNodes,omitempty"`
	// MassStop is the stop scenario's graceful stop.
	MassStop *MassStop `json:"massStop,omitempty"`
	// Churn is the churn scenario's lock writes.
	Churn *Churn `json:"churn,omitempty"`
	// RealNodes are the realnodes scenario's samples.
	RealNodes []RealNodeSample `json:"realNodes,omitempty"`
	// MoveMethod says how moves were requested; PluginNote why the plugin
	// was not used.
	MoveMethod string   `json:"moveMethod,omitempty"`
	PluginNote string   `json:"pluginNote,omitempty"`
	Errors     []string `json:"errors,omitempty"`
}

// Run measures the scenarios on the cluster. A scenario that fails is
// recorded in Report.Errors and the next one runs; the returned error is
// only ctx's.
func Run(ctx context.Context, o Options) (*Report, error) {
	o.setDefaults()
	nodes := o.Cluster.Nodes()
	nodes = nodes[:min(3, len(nodes))]
	r := &Report{Machine: DescribeMachine(), Started: time.Now(), Nodes: len(nodes), Timings: []Timing{defaultTiming, tunedTiming}, Config: o.Config}
	plugin := o.KubectlEip
	if ok, why := pluginWorks(ctx, plugin); !ok {
		plugin, r.PluginNote = "", why
	}
	e, err := newEnv(o.Cluster, nodes, o.Log, o.EipdArgs, o.Config, plugin)
	if err != nil {
		return nil, err
	}
	// record notes that what is done, and its error if it failed.
	record := func(what string, err error) {
		if err != nil {
			o.Log.Error(what, "err", err)
			r.Errors = append(r.Errors, what+": "+err.Error())
		}
		if o.Measured != nil {
			r.Took, r.Machine.LoadEnd, r.Figures = time.Since(r.Started), loadAvg(), r.figures()
			o.Measured(r)
		}
	}
	for _, sc := range Scenarios() {
		if !slices.Contains(o.Only, sc) {
			continue
		}
		switch sc {
		case ScenarioFailover:
			for _, t := range []Timing{defaultTiming, tunedTiming} {
				if !slices.Contains(o.Leases, t.Lease) {
					continue
				}
				s, err := e.failovers(ctx, t, o.Faults, o.Reps)
				r.Failover = append(r.Failover, s...)
				record("failover "+t.Name, err)
			}
		case ScenarioMove:
			s, err := e.moves(ctx, o.MoveReps)
			r.Moves = s
			record("moves", err)
			for _, m := range s {
				if m.Method != "" {
					r.MoveMethod = m.Method
				}
			}
		case ScenarioBGP:
			s, err := e.bgpHandovers(ctx, o.BGPReps)
			r.BGP, r.RouterHoldTime = s, testenv.RouterHoldTime
			record("route mode", err)
			for _, m := range s {
				if m.Method != "" {
					r.MoveMethod = m.Method
				}
			}
		case ScenarioBind:
			s, err := e.bindLatency(ctx, o.BindReps)
			r.Bind = s
			record("bind latency", err)
		case ScenarioLoad:
			bg, err := e.background(ctx, o.Window)
			if err == nil {
				r.Background = &bg
			}
			record("background Lease traffic", err)
			for _, n := range o.LoadIPs {
				res, err := e.scale(ctx, scaleRun{ips: n, window: o.Window, settle: o.Settle})
				if err != nil {
					res.Error = err.Error()
				}
				r.Load = append(r.Load, res)
				record(fmt.Sprintf("load %d IPs", n), err)
			}
		case ScenarioScale:
			quotas := []float64{0}
			if o.StarvedQuota > 0 {
				quotas = append(quotas, o.StarvedQuota)
				if o.StarvedOnly {
					quotas = quotas[1:]
				}
			}
			for _, n := range o.ScaleIPs {
				for _, q := range quotas {
					res, err := e.scale(ctx, scaleRun{ips: n, window: o.Window, settle: o.Settle, status: q == 0, profileDir: o.ProfileDir, quota: q,
						leaseRate: q == 0, massFailover: q == 0})
					if err != nil {
						res.Error = err.Error()
					}
					r.Scale = append(r.Scale, res)
					record(fmt.Sprintf("scale %d IPs%s", n, res.quotaText()), err)
				}
			}
		case ScenarioStop:
			m, err := e.massStop(ctx, o.StopIPs)
			if err != nil {
				m.Error = err.Error()
			}
			r.MassStop = &m
			record(fmt.Sprintf("graceful stop of %d IPs", o.StopIPs), err)
		case ScenarioChurn:
			c, err := e.churn(ctx, o.ChurnIPs, 2*o.Window)
			if err != nil {
				c.Error = err.Error()
			}
			r.Churn = &c
			record(fmt.Sprintf("churn with %d IPs", o.ChurnIPs), err)
		case ScenarioRealNodes:
			s, err := realNodeGaps(ctx, o.Log, o.RealNodeReps)
			r.RealNodes = s
			record("real nodes", err)
		case ScenarioNodes:
			for _, k := range o.NodeCounts {
				run := scaleRun{ips: o.NodeIPs, window: o.Window, settle: o.Settle, massFailover: true, joinFirst: true}
				if o.ProfileDir != "" {
					run.profileDir = filepath.Join(o.ProfileDir, fmt.Sprintf("%d-nodes", k))
				}
				res, err := e.onNodes(k).scale(ctx, run)
				if err != nil {
					res.Error = err.Error()
				}
				r.ByNodes = append(r.ByNodes, res)
				record(fmt.Sprintf("%d nodes", k), err)
			}
		}
		if ctx.Err() != nil {
			return r, ctx.Err()
		}
	}
	record("clean up", e.reset(ctx, defaultTiming, false))
	r.Took = time.Since(r.Started)
	r.Machine.LoadEnd = loadAvg()
	r.Figures = r.figures()
	return r, nil
}

// WriteDir writes results.json (everything, raw samples included),
// table.txt and bench.svg into dir.
func (r *Report) WriteDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	f, err := os.Create(filepath.Join(dir, "table.txt"))
	if err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	err = errors.Join(r.WriteTable(f), f.Close())
	return errors.Join(err,
		os.WriteFile(filepath.Join(dir, "results.json"), append(b, '\n'), 0o644),
		os.WriteFile(filepath.Join(dir, "bench.svg"), r.Plot(), 0o644))
}
