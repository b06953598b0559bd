// Command bench measures eip against the targets of docs/design.md on a real
// test cluster (package testenv) and prints a table of the figures; the
// raw samples (results.json), the table and a plot (bench.svg) go to a
// results directory. It needs root and the binaries of make build and
// scripts/build-k8s.sh (see scripts/bench.sh, which `make bench` runs).
//
//	bench [-out DIR] [-quick] [-only failover,move,bgp,bind,load,scale,nodes,realnodes]
//	      [-reps N] [-move-reps N] [-bgp-reps N] [-real-reps N] [-scale 1000,10000] [-load 10,100] [-nodes 10,25,50]
//	      [-node-ips 1000] [-window 30s] [-profile]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/eip-project/eip/testenv"
	"github.com/eip-project/eip/testenv/bench"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	out := fs.String("out", "", "results directory (default results/<time> in the repository)")
	quick := fs.Bool("quick", false, "a short run: 5 repetitions, 10 s windows")
	only := fs.String("only", strings.Join(bench.Scenarios(), ","), "scenarios to run")
	reps := fs.Int("reps", 20, "failovers per fault and lease duration")
	faults := fs.String("faults", bench.FaultKill+",cut", "faults of the failover scenario: SIGKILL, cut (the holder's link)")
	leases := fs.String("leases", "2s,1s", "lease durations of the failover scenario: 2s (renew 500ms), 1s (renew 250ms)")
	moveReps := fs.Int("move-reps", 20, "planned moves, and graceful shutdowns")
	bindReps := fs.Int("bind-reps", 20, "Services created for the bind latency")
	bgpReps := fs.Int("bgp-reps", 20, "route-mode failovers, and route-mode moves, through the BGP router")
	realReps := fs.Int("real-reps", 5, "rollout restarts, holder pod deletions, and eTP=Local pod moves and scales from zero, on real nodes")
	load := fs.String("load", "10,100", "IP counts whose steady-state Lease requests are measured")
	scale := fs.String("scale", "1000", "IP counts timed from a cold start, with memory and CPU, and a mass failover")
	stopIPs := fs.Int("stop-ips", 5000, "IPs the node stopped with SIGTERM holds, in the stop scenario")
	churnIPs := fs.Int("churn-ips", 1000, "IPs of the churn scenario, whose lock writes are counted while a node leaves and returns")
	nodes := fs.String("nodes", "10,25,50", "node counts of the nodes scenario")
	nodeIPs := fs.Int("node-ips", 1000, "IPs of the nodes scenario")
	window := fs.Duration("window", 30*time.Second, "steady-state window")
	settle := fs.Duration("settle", 5*time.Second, "wait after everything is bound, before a window")
	starve := fs.Float64("starve", 10, "also run each scale with every eipd limited to this share of one core, in percent (0: do not)")
	starvedOnly := fs.Bool("starved-only", false, "run each scale only with eipd limited by -starve")
	profile := fs.Bool("profile", false, "run eipd with --pprof and save CPU and heap profiles (of the first node) at each scale and node count, and kube-apiserver's CPU profile and metrics over the plain client's creates and the cold start")
	verbose := fs.Bool("v", false, "log each sample")
	keep := fs.Bool("keep", false, "keep the cluster's run directory (logs) even when everything worked")
	config := map[string]string{}
	fs.Func("config", "an extra eip-config key for every scenario, KEY=VALUE (repeatable), e.g. liveness-port=off", func(v string) error {
		k, val, ok := strings.Cut(v, "=")
		if !ok || k == "" {
			return fmt.Errorf("want KEY=VALUE, got %q", v)
		}
		config[k] = val
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *quick {
		*reps, *moveReps, *bindReps, *bgpReps, *window, *settle = 5, 5, 5, 5, 10*time.Second, 3*time.Second
		*realReps = 2
	}
	loadIPs, err := ints(*load)
	if err != nil {
		return fmt.Errorf("flag -load: %w", err)
	}
	scaleIPs, err := ints(*scale)
	if err != nil {
		return fmt.Errorf("flag -scale: %w", err)
	}
	nodeCounts, err := ints(*nodes)
	if err != nil {
		return fmt.Errorf("flag -nodes: %w", err)
	}
	faultList, leaseList, err := failoverChoice(*faults, *leases)
	if err != nil {
		return err
	}
	clusterNodes := 3
	if strings.Contains(","+*only+",", ","+bench.ScenarioNodes+",") {
		clusterNodes = max(clusterNodes, slices.Max(append(nodeCounts, 0)))
	}
	for _, sc := range strings.Split(*only, ",") {
		if !slices.Contains(bench.Scenarios(), sc) {
			return fmt.Errorf("flag -only: unknown scenario %q (have %s)", sc, strings.Join(bench.Scenarios(), ", "))
		}
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		return err
	}
	started := time.Now()
	if *out == "" {
		*out = filepath.Join(root, "results", started.Format("20060102-150405"))
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	ctx := context.Background()
	fmt.Fprintf(os.Stderr, "bench: starting a %d-node test cluster\n", clusterNodes)
	router := strings.Contains(","+*only+",", ","+bench.ScenarioBGP+",")
	c, err := testenv.Start(ctx, testenv.Options{Nodes: clusterNodes, ServiceIPs: bench.MaxPinged, Router: router, Logger: log, Profiling: *profile})
	if err != nil {
		return err
	}
	neigh := c.NeighTable()
	if neigh != "" {
		fmt.Fprintf(os.Stderr, "bench: %s (restored when the cluster closes)\n", neigh)
	}
	if *keep {
		c.Keep() // an interrupted run too
	}
	stop := c.CloseOnInterrupt()
	defer stop()
	eipdArgs := []string{"-v=0"}
	o := bench.Options{
		Cluster: c, Log: log, Only: strings.Split(*only, ","),
		Reps: *reps, Faults: faultList, Leases: leaseList, MoveReps: *moveReps, BindReps: *bindReps, BGPReps: *bgpReps, RealNodeReps: *realReps,
		LoadIPs: loadIPs, ScaleIPs: scaleIPs, StopIPs: *stopIPs, ChurnIPs: *churnIPs, NodeCounts: nodeCounts, NodeIPs: *nodeIPs, Window: *window, Settle: *settle, StarvedQuota: *starve, StarvedOnly: *starvedOnly,
		KubectlEip: os.Getenv("KUBECTL_EIP_BIN"), Config: config,
	}
	if *profile {
		eipdArgs = append(eipdArgs, "--pprof")
		o.ProfileDir = filepath.Join(*out, "profiles")
	}
	o.EipdArgs = eipdArgs
	commit := commandLine(root, "git", "describe", "--always", "--dirty")
	eipd := commandLine(root, eipdBin(root), "--version")
	o.Measured = func(r *bench.Report) {
		r.Machine.Commit, r.Machine.Eipd, r.Machine.NeighTable = commit, eipd, neigh
		if err := r.WriteDir(*out); err != nil {
			log.Warn("write the results so far", "err", err)
		}
	}
	fmt.Fprintf(os.Stderr, "bench: measuring %s (cluster %s, logs in %s, results as they come in %s)\n", *only, c.ID(), c.Dir(), *out)
	r, err := bench.Run(ctx, o)
	if *keep || err != nil || r == nil || len(r.Errors) > 0 {
		c.Keep()
	}
	closeErr := c.Close()
	if r == nil {
		return errors.Join(err, closeErr)
	}
	r.Machine.Commit, r.Machine.Eipd, r.Machine.NeighTable = commit, eipd, neigh
	if werr := r.WriteTable(os.Stdout); werr != nil {
		err = errors.Join(err, werr)
	}
	if werr := r.WriteDir(*out); werr != nil {
		err = errors.Join(err, werr)
	}
	fmt.Printf("\nraw samples, table and plot: %s\n", *out)
	if len(r.Errors) > 0 {
		err = errors.Join(err, fmt.Errorf("%d scenario(s) failed; cluster logs kept in %s", len(r.Errors), c.Dir()))
	}
	return errors.Join(err, closeErr)
}

func ints(s string) ([]int, error) {
	out := []int{}
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func eipdBin(root string) string {
	if b := os.Getenv("EIPD_BIN"); b != "" {
		return b
	}
	return filepath.Join(root, "bin", "eipd")
}

// commandLine is the first line a command prints, "" when it fails.
func commandLine(dir, name string, args ...string) string {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	b, err := cmd.Output()
	if err != nil {
		return ""
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimSpace(line)
}

// failoverChoice reads -faults and -leases.
func failoverChoice(faults, leases string) ([]string, []time.Duration, error) {
	var fs []string
	for _, f := range strings.Split(faults, ",") {
		switch f {
		case bench.FaultKill:
			fs = append(fs, bench.FaultKill)
		case "cut":
			fs = append(fs, bench.FaultCut)
		default:
			return nil, nil, fmt.Errorf("flag -faults: unknown fault %q (have %s, cut)", f, bench.FaultKill)
		}
	}
	var ls []time.Duration
	for _, l := range strings.Split(leases, ",") {
		d, err := time.ParseDuration(l)
		if err != nil || d != time.Second && d != 2*time.Second {
			return nil, nil, fmt.Errorf("flag -leases: %q is not one of 2s, 1s", l)
		}
		ls = append(ls, d)
	}
	return fs, ls, nil
}
