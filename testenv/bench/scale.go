package bench

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/eip-project/eip/testenv"
)

// progressEvery is how often the cold start counts bound addresses.
const progressEvery = 100 * time.Millisecond

// statusRuns is how many times kubectl eip status is timed.
const statusRuns = 3

// ScaleResult is one cold start of many IPs and the steady state after it.
type ScaleResult struct {
	IPs int `json:"ips"`
	// CPUQuota is the share of one core each eipd was limited to, in
	// percent; 0 when unlimited.
	CPUQuota float64 `json:"cpuQuota,omitempty"`
	// Vanished counts benchmark addresses removed from a node while its
	// eipd ran, from the cold start to the end of the steady window, as
	// watched over netlink. Nothing moves in a scale run, so every removal
	// is a held address lost.
	Vanished int `json:"vanished"`
	// VanishedWhy explains the first removals: when, where the IP went,
	// and what the node's eipd logged about it.
	VanishedWhy []string `json:"vanishedWhy,omitempty"`
	// Nodes is the number of nodes running eipd.
	Nodes int `json:"nodes"`
	// LeaseRate is this API server's own Lease create rate, measured just
	// before the cold start, when the run asked for it.
	LeaseRate *LeaseRate `json:"leaseRate,omitempty"`
	// Join, when the eipds joined before their ranges held the IPs (the
	// nodes scenario): every eipd started at once → every heartbeat
	// renewed, and a lease duration more.
	Join time.Duration `json:"join,omitempty"`
	// CreateServices is how long creating one Service per IP took (setup,
	// not judged).
	CreateServices time.Duration `json:"createServices"`
	// ColdStart: every eipd started → every IP bound on exactly one node,
	// counted on the nodes' interfaces; when the eipds joined first, the
	// ConfigMap's ranges given to them → every IP bound.
	ColdStart time.Duration `json:"coldStart"`
	Progress  []Point       `json:"progress"`
	// ColdStartCPU is where the machine's CPU went from the eipds' start
	// (or the ranges given to the joined eipds) to the last bind: each
	// eipd's (on a loaded machine a steadier measure of its work than the
	// wall time), the control plane's, the benchmark's, the machine's.
	ColdStartCPU *CPUAccount `json:"coldStartCPU,omitempty"`
	// CreateLatency is the API server's mean time to serve a Lease POST
	// during the cold start.
	CreateLatency time.Duration `json:"createLatency"`
	// Creates and Conflicts are the Lease POSTs the API server served
	// during the cold start, and the POSTs and PUTs it refused with 409.
	Creates   int `json:"creates"`
	Conflicts int `json:"conflicts"`
	// Steady are the API server's Lease request rates over the window,
	// SteadyAPI its requests, watch events and CPU for every resource.
	Steady    Rates         `json:"steady"`
	SteadyAPI APILoad       `json:"steadyAPI"`
	Daemons   []DaemonStats `json:"daemons"`
	// Status are wall times of kubectl eip status listing every IP;
	// StatusCPU the plugin's own CPU time (user and system) in each, and
	// StatusAPIServerCPU kube-apiserver's over each: on a machine shared
	// with other work the wall time follows the load, these less so.
	Status             []time.Duration `json:"status,omitempty"`
	StatusCPU          []time.Duration `json:"statusCPU,omitempty"`
	StatusAPIServerCPU []time.Duration `json:"statusAPIServerCPU,omitempty"`
	StatusNote         string          `json:"statusNote,omitempty"`
	// MassFailover: the node holding the most IPs lost, when the run asked
	// for it.
	MassFailover *MassFailover `json:"massFailover,omitempty"`
	// Logged counts, per node, what its eipd logged from the cold start to
	// the end of the window (or to the failure): the mass failover is not
	// in it.
	Logged map[string]LogCounts `json:"logged,omitempty"`
	// Events are what each eipd posted as Events from the cold start to
	// the end of the window, and EventsFor how long that was.
	Events    map[string]EventCounts `json:"events,omitempty"`
	EventsFor time.Duration          `json:"eventsFor,omitempty"`
	Error     string                 `json:"error,omitempty"`
}

// Point is the number of IPs bound T seconds into a cold start.
type Point struct {
	T     float64 `json:"t"`
	Bound int     `json:"bound"`
}

// DaemonStats is one eipd at the end of a steady-state window.
type DaemonStats struct {
	Node string `json:"node"`
	PID  int    `json:"pid"`
	// Bound is the number of benchmark IPs on the node's interface.
	Bound int `json:"bound"`
	// RSS and PeakRSS (VmRSS, VmHWM) in bytes.
	RSS     int64 `json:"rss"`
	PeakRSS int64 `json:"peakRSS"`
	// CPU is the CPU used over the window, in percent of one core.
	CPU float64 `json:"cpuPercent"`
}

// ScaleRun says what one scale run measures besides the cold start.
type scaleRun struct {
	ips        int
	window     time.Duration
	settle     time.Duration
	status     bool
	profileDir string
	quota      float64 // percent of a core per eipd; 0: unlimited
	// leaseRate: first measure the API server's own Lease create rate
	// for as many Leases, while no eipd runs (so not with joinFirst);
	// massFailover: end with a mass failover.
	leaseRate, massFailover bool
	// joinFirst: the eipds join while the ConfigMap's ranges hold none of
	// the IPs, and get them all in one write once every eipd has joined:
	// the IPs are spread over a cluster that is up, as the policy spreads
	// them, rather than taken by the eipds started first.
	joinFirst bool
}

// scale creates run.ips Services while no eipd runs, starts eipd on every
// node and counts the bound addresses until all are bound, then measures a
// steady-state window. With run.joinFirst the eipds start, and join, while
// the ConfigMap's ranges hold none of the IPs, and the cold start begins
// when it gives them.
func (e *env) scale(ctx context.Context, run scaleRun) (res ScaleResult, err error) {
	e.log.Info("scale", "ips", run.ips, "joinFirst", run.joinFirst)
	res = ScaleResult{IPs: run.ips, CPUQuota: run.quota, Nodes: len(e.nodes)}
	if err := e.reset(ctx, defaultTiming, false); err != nil {
		return res, err
	}
	ips := make([]netip.Addr, run.ips)
	for i := range ips {
		ips[i] = serviceIP(i)
	}
	// The Services are created before any eipd runs, also when the eipds
	// join first: on the test bed, with fifty eipds up, 865 of 1,000 took
	// 11 minutes (one kubectl create 18-38 s), against 4-7 s without them.
	config := e.configFor(defaultTiming)
	if run.joinFirst {
		// A range none of the IPs is in, rather than none: a node without
		// ranges may hold nothing, and fifty nodes made eligible by the
		// same write would each race for every IP before it saw the
		// others eligible.
		withheld := maps.Clone(config)
		withheld["ranges"] = routedRange.String()
		if err := e.setConfig(ctx, withheld); err != nil {
			return res, err
		}
	}
	began := time.Now()
	if err := e.createServices(ctx, ips); err != nil {
		return res, err
	}
	res.CreateServices = time.Since(began)
	e.log.Info("services created", "ips", run.ips, "took", res.CreateServices)
	if run.joinFirst {
		began := time.Now()
		if err := e.join(ctx, defaultTiming); err != nil {
			return res, err
		}
		res.Join = time.Since(began)
		e.log.Info("eipds joined", "nodes", len(e.nodes), "took", res.Join)
		// Up for a while, as a cluster given new IPs would be.
		if err := pause(ctx, run.settle); err != nil {
			return res, err
		}
	}
	if run.leaseRate {
		r, err := e.leaseRate(ctx, run.ips, run.profileDir)
		if err != nil {
			return res, err
		}
		res.LeaseRate = &r
	}

	before, err := ScrapeLeases(ctx, e.c.AdminConfig())
	if err != nil {
		return res, err
	}
	watch, err := watchAddrs(e.nodes, inRange)
	if err != nil {
		return res, err
	}
	defer watch.Close()
	marks := map[string]int64{}
	for _, n := range e.nodes {
		marks[n.Name] = logMark(e.c.DaemonLog(n.Name))
	}
	counted := false
	countLogs := func() {
		if counted {
			return
		}
		counted = true
		res.Logged = map[string]LogCounts{}
		for _, n := range e.nodes {
			c, err := countLog(e.c.DaemonLog(n.Name), marks[n.Name])
			if err != nil {
				e.log.Warn("count what eipd logged", "node", n.Name, "err", err)
				continue
			}
			res.Logged[n.Name] = c
		}
	}
	defer countLogs() // a run that failed too
	cpuBefore, err := e.cpuSnapshot()
	if err != nil {
		return res, err
	}
	t0 := time.Now()
	if run.joinFirst {
		if err := e.setConfig(ctx, config); err != nil {
			return res, err
		}
	}
	for _, n := range e.nodes {
		if !run.joinFirst {
			if err := e.c.StartDaemon(n.Name, e.args...); err != nil {
				return res, err
			}
		}
		if run.quota > 0 {
			q, err := limitCPU(e.c.DaemonPID(n.Name), fmt.Sprintf("eip-bench-%d-%s", os.Getpid(), n.Name), run.quota)
			if err != nil {
				return res, err
			}
			defer func() {
				if err := q.release(); err != nil {
					e.log.Warn("release CPU limit", "err", err)
				}
			}()
		}
	}
	profiled := make(chan error, 2)
	if run.profileDir != "" {
		tag := fmt.Sprintf("%d-coldstart", run.ips)
		go func() { profiled <- e.profile(ctx, e.nodes[0].Name, run.profileDir, tag, "cpu") }()
		go func() { profiled <- e.profileAPIServer(ctx, run.profileDir, tag, 10) }()
	} else {
		profiled <- nil
		profiled <- nil
	}
	err = e.coldStart(ctx, t0, watch, &res)
	if err == nil {
		var cpuAfter cpuSnapshot
		if cpuAfter, err = e.cpuSnapshot(); err == nil {
			acc := accountBetween(cpuBefore, cpuAfter)
			res.ColdStartCPU = &acc
		}
	}
	for range 2 {
		if perr := <-profiled; perr != nil {
			e.log.Warn("profile", "err", perr)
		}
	}
	if err != nil {
		return res, err
	}
	after, err := ScrapeLeases(ctx, e.c.AdminConfig())
	if err != nil {
		return res, err
	}
	res.CreateLatency = MeanLatency(before, after, "POST")
	res.Creates = int(after.Requests["POST"] - before.Requests["POST"])
	res.Conflicts = int(after.Conflicts["POST"] + after.Conflicts["PUT"] - before.Conflicts["POST"] - before.Conflicts["PUT"])
	e.log.Info("all bound", "ips", run.ips, "coldStart", res.ColdStart, "cpu", res.ColdStartCPU.Processes, "createLatency", res.CreateLatency, "creates", res.Creates, "conflicts", res.Conflicts)

	if err := pause(ctx, run.settle); err != nil {
		return res, err
	}
	if res.Steady, res.SteadyAPI, res.Daemons, err = e.steady(ctx, run.window); err != nil {
		return res, err
	}
	if err := watch.Err(); err != nil {
		return res, err
	}
	removed := watch.Removed(ips)
	res.Vanished = len(removed)
	res.VanishedWhy = explainRemovals(removed, t0, e.c.DaemonLog, marks)
	countLogs()
	res.EventsFor = time.Since(t0)
	if res.Events, err = e.countEvents(ctx, t0); err != nil {
		return res, err
	}
	e.log.Info("steady state", "ips", run.ips, "writesPerSec", res.Steady.Writes, "readsPerSec", res.Steady.Reads)
	if run.status {
		e.timeStatus(ctx, &res)
	}
	if run.profileDir != "" {
		if err := e.profile(ctx, e.nodes[0].Name, run.profileDir, fmt.Sprintf("%d-steady", run.ips), "cpu", "heap"); err != nil {
			e.log.Warn("profile", "err", err)
		}
	}
	if run.massFailover {
		m, err := e.massFailover(ctx, defaultTiming, run.profileDir, fmt.Sprintf("%d-massfailover", run.ips))
		if err != nil {
			m.Error = err.Error()
		}
		res.MassFailover = &m
		return res, err
	}
	return res, nil
}

// coldStart counts the benchmark addresses on every node until each IP is
// bound on exactly one, from the nodes' netlink address events (watch),
// then confirms it with a listing of every node's addresses. Listing
// thousands of addresses on each node every tick instead took the
// benchmark a large share of the cores the API server and the eipds
// needed, and the eipds' binds interrupted the listings over and over.
func (e *env) coldStart(ctx context.Context, t0 time.Time, watch *addrWatch, res *ScaleResult) error {
	// Every eipd of the test bed shares this machine's cores: fifty of
	// them need more time than three.
	limit := max(deadline, time.Duration(res.IPs)*120*time.Millisecond*time.Duration(max(1, len(e.nodes)/3)))
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	tick := time.NewTicker(progressEvery)
	defer tick.Stop()
	for {
		if err := watch.Err(); err != nil {
			return fmt.Errorf("cold start of %d IPs: %w", res.IPs, err)
		}
		bound, twice := watch.Counts()
		now := time.Since(t0)
		res.Progress = append(res.Progress, Point{T: now.Seconds(), Bound: bound})
		if bound == res.IPs && twice == 0 {
			listed, listedTwice, err := e.listBound()
			if err != nil {
				return err
			}
			if listed == res.IPs && listedTwice == 0 {
				res.ColdStart = now
				return nil
			}
			e.log.Warn("the address events and the listing disagree; counting on", "events", bound, "listed", listed, "listedTwice", listedTwice)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cold start of %d IPs: %d bound (%d on two nodes) after %s", res.IPs, bound, twice, limit)
		case <-tick.C:
		}
	}
}

// listBound lists the benchmark addresses of every node, and says how
// many IPs are bound on any, and how many on two or more.
func (e *env) listBound() (bound, twice int, err error) {
	on := map[netip.Addr]int{}
	for _, n := range e.nodes {
		addrs, err := e.boundAddrs(n.Name)
		if err != nil {
			return 0, 0, err
		}
		for _, a := range addrs {
			on[a]++
		}
	}
	for _, c := range on {
		if c > 1 {
			twice++
		}
	}
	return len(on), twice, nil
}

// background measures the API server's Lease requests over window while
// no eipd runs: what the API server does on its own.
func (e *env) background(ctx context.Context, window time.Duration) (Rates, error) {
	e.log.Info("background Lease traffic", "window", window)
	if err := e.reset(ctx, defaultTiming, false); err != nil {
		return Rates{}, err
	}
	before, err := LeaseRequests(ctx, e.c.AdminConfig())
	if err != nil {
		return Rates{}, err
	}
	start := time.Now()
	if err := pause(ctx, window); err != nil {
		return Rates{}, err
	}
	after, err := LeaseRequests(ctx, e.c.AdminConfig())
	if err != nil {
		return Rates{}, err
	}
	return RatesBetween(before, after, time.Since(start)), nil
}

// steady measures the API server's Lease requests and each eipd's memory
// and CPU over window. Nothing else talks to the API server meanwhile.
func (e *env) steady(ctx context.Context, window time.Duration) (Rates, APILoad, []DaemonStats, error) {
	before, err := LeaseRequests(ctx, e.c.AdminConfig())
	if err != nil {
		return Rates{}, APILoad{}, nil, err
	}
	apiBefore, err := ScrapeAPITotals(ctx, e.c.AdminConfig())
	if err != nil {
		return Rates{}, APILoad{}, nil, err
	}
	start := time.Now()
	procs := map[string]ProcSample{}
	for _, n := range e.nodes {
		if procs[n.Name], err = ReadProc(e.c.DaemonPID(n.Name)); err != nil {
			return Rates{}, APILoad{}, nil, err
		}
	}
	if err := pause(ctx, window); err != nil {
		return Rates{}, APILoad{}, nil, err
	}
	after, err := LeaseRequests(ctx, e.c.AdminConfig())
	if err != nil {
		return Rates{}, APILoad{}, nil, err
	}
	rates := RatesBetween(before, after, time.Since(start))
	apiAfter, err := ScrapeAPITotals(ctx, e.c.AdminConfig())
	if err != nil {
		return rates, APILoad{}, nil, err
	}
	load := LoadBetween(apiBefore, apiAfter)
	var stats []DaemonStats
	for _, n := range e.nodes {
		pid := e.c.DaemonPID(n.Name)
		end, err := ReadProc(pid)
		if err != nil {
			return rates, load, nil, err
		}
		bound, err := e.boundCount(n.Name)
		if err != nil {
			return rates, load, nil, err
		}
		stats = append(stats, DaemonStats{Node: n.Name, PID: pid, Bound: bound, RSS: end.RSS, PeakRSS: end.PeakRSS,
			CPU: CPUPercent(procs[n.Name], end)})
	}
	return rates, load, stats, nil
}

// timeStatus times kubectl eip status, run as a user would from the
// client namespace.
func (e *env) timeStatus(ctx context.Context, res *ScaleResult) {
	if e.plugin == "" {
		res.StatusNote = "kubectl-eip has no status command yet"
		return
	}
	for range statusRuns {
		cmd, err := e.c.Command(ctx, testenv.Client, e.plugin, "--kubeconfig="+e.c.AdminKubeconfig(), "status")
		if err != nil {
			res.StatusNote = err.Error()
			return
		}
		cmd.Stdout = io.Discard
		apiBefore, apiErr := readCPU(e.c.APIServerPID())
		began := time.Now()
		err = cmd.Run()
		took := time.Since(began)
		if err != nil {
			res.StatusNote = fmt.Sprintf("kubectl eip status: %v", err)
			return
		}
		res.Status = append(res.Status, took)
		// ip netns exec execs the plugin: the process waited for is it.
		res.StatusCPU = append(res.StatusCPU, cmd.ProcessState.UserTime()+cmd.ProcessState.SystemTime())
		if apiAfter, err := readCPU(e.c.APIServerPID()); apiErr == nil && err == nil {
			res.StatusAPIServerCPU = append(res.StatusAPIServerCPU, apiAfter-apiBefore)
		}
	}
}

// profile saves profiles of eipd on node, served with --pprof on its
// metrics address: "cpu" or "trace" (an execution trace), each of the 10
// seconds from when it is asked for, or "heap". A daemon that
// is just starting is waited for.
func (e *env) profile(ctx context.Context, node, dir, tag string, kinds ...string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("profile: %w", err)
	}
	hc := e.c.ClientHTTP()
	hc.Timeout = time.Minute
	base := "http://" + e.c.DaemonMetricsAddr(node)
	if err := waitFor(ctx, deadline, "metrics of "+node, func() (bool, error) {
		resp, err := hc.Get(base + "/healthz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	}); err != nil {
		return err
	}
	paths := map[string]string{"cpu": "/debug/pprof/profile?seconds=10", "trace": "/debug/pprof/trace?seconds=10", "heap": "/debug/pprof/heap"}
	for _, kind := range kinds {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+paths[kind], nil)
		if err != nil {
			return fmt.Errorf("profile %s: %w", node, err)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return fmt.Errorf("profile %s: %w", node, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			return fmt.Errorf("profile %s: %s %v", node, resp.Status, err)
		}
		name := filepath.Join(dir, fmt.Sprintf("eipd-%s-%s-%s.pprof", node, tag, kind))
		if err := os.WriteFile(name, b, 0o644); err != nil {
			return fmt.Errorf("profile %s: %w", node, err)
		}
	}
	return nil
}
