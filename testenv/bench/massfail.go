package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"syscall"
	"time"

	"github.com/eip-project/eip/testenv"
)

// massProbes is how many of the lost node's IPs the client pings, and
// massProbeEvery how often it pings each.
const (
	massProbes     = 100
	massProbeEvery = 50 * time.Millisecond
)

// MaxPinged is the most Service IPs the client pings, and so resolves, in
// one scenario: the mass failover's sample. The others ping one IP or a
// few, and the cold starts count addresses over netlink. It sizes the
// test bed's neighbour tables (testenv.Options.ServiceIPs).
const MaxPinged = massProbes

// MassFailover is one node, holding many IPs, lost at once: its eipd is
// SIGKILLed and its link cut in the same instant.
type MassFailover struct {
	Node string `json:"node"`
	IPs  int    `json:"ips"`
	// Bound: the fault → each IP on a survivor's interface (netlink), in
	// seconds, one per IP; Missing counts those never bound again within
	// the deadline.
	Bound   []float64 `json:"bound"`
	Missing int       `json:"missing"`
	// Answered: the fault → the first reply from a survivor, for each
	// pinged IP, in seconds.
	Answered []float64 `json:"answered"`
	// TwoMACs counts the pinged IPs with intervals in which two MACs
	// answered; DoubleBound the IPs that were on two live nodes'
	// interfaces at once (the lost node's addresses are not counted while
	// its link is cut: nobody can reach them).
	TwoMACs     int `json:"twoMACs"`
	DoubleBound int `json:"doubleBound"`
	// DoubleBoundSpans says, for each IP DoubleBound counts, on which
	// survivor it was bound and when, from the fault: what looking into
	// one needs, with the cluster's logs (-keep).
	DoubleBoundSpans []string `json:"doubleBoundSpans,omitempty"`
	// Conflicts are the Lease writes the API server refused with 409
	// during the failover; Writes all Lease writes.
	Conflicts int     `json:"conflicts"`
	Writes    float64 `json:"writes"`
	Error     string  `json:"error,omitempty"`
}

// massFailover takes away the node holding the most IPs while the client
// pings a sample of them and netlink watches all of them, and waits until
// every one is bound on a survivor. The lost node comes back afterwards.
func (e *env) massFailover(ctx context.Context, timing Timing, profileDir, profileTag string) (MassFailover, error) {
	var res MassFailover
	held := map[string][]netip.Addr{}
	for _, n := range e.nodes {
		addrs, err := e.boundAddrs(n.Name)
		if err != nil {
			return res, err
		}
		held[n.Name] = addrs
		if len(addrs) > len(held[res.Node]) {
			res.Node = n.Name
		}
	}
	lost := held[res.Node]
	res.IPs = len(lost)
	if res.IPs == 0 {
		return res, errors.New("mass failover: no node holds an IP")
	}
	e.log.Info("mass failover", "node", res.Node, "ips", res.IPs)
	w, err := watchAddrs(e.nodes, inRange)
	if err != nil {
		return res, err
	}
	defer w.Close()
	sample := slices.Clone(lost)
	rand.Shuffle(len(sample), func(i, j int) { sample[i], sample[j] = sample[j], sample[i] })
	sample = sample[:min(massProbes, len(sample))]
	var probes []*testenv.Probe
	defer func() {
		for _, p := range probes {
			p.Stop()
		}
	}()
	oldMAC := e.mac(res.Node)
	for _, ip := range sample {
		p, err := e.c.Probe(ip, massProbeEvery)
		if err != nil {
			return res, err
		}
		probes = append(probes, p)
	}
	for _, p := range probes {
		if err := waitFor(ctx, deadline, p.Result().Target.String()+" answering from "+res.Node, func() (bool, error) {
			return answeringFrom(p.Result(), oldMAC, time.Now()), nil
		}); err != nil {
			return res, err
		}
	}
	before, err := ScrapeLeases(ctx, e.c.AdminConfig())
	if err != nil {
		return res, err
	}

	// The survivor's heap before and after, whose difference in
	// alloc_space is what the failover allocated (pprof -base).
	heap := func(when string) {
		if profileDir == "" {
			return
		}
		if err := e.profile(ctx, e.survivor(res.Node), profileDir, profileTag+"-"+when, "heap"); err != nil {
			e.log.Warn("profile", "err", err)
		}
	}
	heap("before")
	t0 := time.Now()
	if err := errors.Join(e.c.StopDaemon(res.Node, syscall.SIGKILL), e.c.CutLink(ctx, res.Node)); err != nil {
		return res, err
	}
	// A survivor's CPU profile and execution trace, of the same seconds.
	kinds := []string{"cpu", "trace"}
	profiled := make(chan error, len(kinds))
	for _, kind := range kinds {
		if profileDir == "" {
			profiled <- nil
			continue
		}
		go func() { profiled <- e.profile(ctx, e.survivor(res.Node), profileDir, profileTag, kind) }()
	}
	defer func() {
		for range kinds {
			if err := <-profiled; err != nil {
				e.log.Warn("profile", "err", err)
			}
		}
	}()
	survivor := func(ip netip.Addr) bool {
		on := w.BoundOn(ip)
		return len(on) > 0 && (len(on) > 1 || on[0] != res.Node)
	}
	waitErr := waitFor(ctx, deadline, "every IP of "+res.Node+" on a survivor", func() (bool, error) {
		for _, ip := range lost {
			if !survivor(ip) {
				return false, w.Err()
			}
		}
		return true, w.Err()
	})
	heap("after")
	for _, p := range probes {
		if err := waitFor(ctx, deadline, p.Result().Target.String()+" answering from a survivor", func() (bool, error) {
			_, ok := firstReplyAfter(p.Result(), t0, oldMAC)
			return ok, nil
		}); err != nil {
			waitErr = errors.Join(waitErr, err)
			break
		}
	}
	end := time.Now()
	after, err := ScrapeLeases(ctx, e.c.AdminConfig())
	if err != nil {
		return res, err
	}
	res.Conflicts = int(after.Conflicts["POST"] + after.Conflicts["PUT"] - before.Conflicts["POST"] - before.Conflicts["PUT"])
	res.Writes = RatesBetween(before.Requests, after.Requests, time.Second).Writes
	for _, ip := range lost {
		first := time.Duration(-1)
		var live []boundSpan
		for _, sp := range w.Spans(ip, end) {
			if sp.Node == res.Node {
				continue
			}
			live = append(live, sp)
			if sp.From.After(t0) && (first < 0 || sp.From.Sub(t0) < first) {
				first = sp.From.Sub(t0)
			}
		}
		if first < 0 {
			res.Missing++
		} else {
			res.Bound = append(res.Bound, first.Seconds())
		}
		if multiBound(live, t0, end) > 0 {
			res.DoubleBound++
			res.DoubleBoundSpans = append(res.DoubleBoundSpans, spansText(ip, live, t0))
		}
	}
	for _, p := range probes {
		r := p.Stop()
		if first, ok := firstReplyAfter(r, t0, oldMAC); ok {
			res.Answered = append(res.Answered, first.At.Sub(t0).Seconds())
		}
		if len(r.Overlaps()) > 0 {
			res.TwoMACs++
		}
	}
	probes = nil
	e.log.Info("mass failover done", "node", res.Node, "ips", res.IPs, "missing", res.Missing, "conflicts", res.Conflicts,
		"p99", Summarize(res.Bound).P99)
	restored := time.Now()
	err = errors.Join(waitErr, e.c.RestoreLink(ctx, res.Node), e.c.StartDaemon(res.Node, e.args...))
	if err == nil {
		err = e.waitRenewed(ctx, res.Node, restored)
	}
	if err != nil {
		return res, fmt.Errorf("mass failover of %s: %w", res.Node, err)
	}
	return res, w.Err()
}

// survivor is the first node other than lost.
func (e *env) survivor(lost string) string {
	for _, n := range e.nodes {
		if n.Name != lost {
			return n.Name
		}
	}
	return lost
}

// spansText is ip and where it was bound, in seconds from t0.
func spansText(ip netip.Addr, spans []boundSpan, t0 time.Time) string {
	out := ip.String() + ":"
	for _, sp := range spans {
		out += fmt.Sprintf(" %s %.3f–%.3f s", sp.Node, sp.From.Sub(t0).Seconds(), sp.To.Sub(t0).Seconds())
	}
	return out
}
