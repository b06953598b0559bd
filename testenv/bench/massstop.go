package bench

import (
	"context"
	"fmt"
	"net/netip"
	"syscall"
	"time"
)

// MassStop is a graceful stop (SIGTERM, as a rollout or a drain sends it)
// of a node that holds every IP: each must be handed to a survivor, none
// left dark until peers would judge the node dead.
type MassStop struct {
	Node string `json:"node"`
	IPs  int    `json:"ips"`
	// Gap is, for each IP handed off, the time from its address leaving
	// the stopped node to its being bound on a survivor, in seconds, as
	// netlink saw them; below 0 when the survivor bound it first.
	Gap []float64 `json:"gap"`
	// NotHandedOff counts the IPs bound on no survivor within the
	// deadline after the stop, or with a gap beyond ±handOff: taken over
	// by ordinary failover, after a lease duration, or while the stopped
	// node still had them (the same IPs count in DoubleBound too).
	// DoubleBound counts those on two nodes' interfaces at once.
	NotHandedOff int `json:"notHandedOff"`
	DoubleBound  int `json:"doubleBound"`
	// Exited is the SIGTERM → the stopped eipd's exit.
	Exited time.Duration `json:"exited"`
	Error  string        `json:"error,omitempty"`
}

// handOff is the longest gap of an IP, either way, that still counts as
// handed off: a hand-off takes milliseconds (a few below 0 when netlink
// events of two namespaces arrive out of order), whereas a survivor that
// was handed nothing takes the IP over when the lease duration (2 s) has
// passed, whether the stopped node still has it or not.
const handOff = time.Second

// massStop starts eipd on the first node alone until it holds all ips
// IPs, then on the others (sticky: nothing moves), and stops the first
// with SIGTERM, watching every address over netlink.
func (e *env) massStop(ctx context.Context, ips int) (MassStop, error) {
	holder := e.nodes[0].Name
	res := MassStop{Node: holder, IPs: ips}
	e.log.Info("mass stop", "node", holder, "ips", ips)
	if err := e.reset(ctx, defaultTiming, false); err != nil {
		return res, err
	}
	addrs, err := e.serviceIPs(ctx, ips)
	if err != nil {
		return res, err
	}
	w, err := watchAddrs(e.nodes, inRange)
	if err != nil {
		return res, err
	}
	defer w.Close()
	if err := e.c.StartDaemon(holder, e.args...); err != nil {
		return res, err
	}
	if err := waitFor(ctx, 2*deadline, fmt.Sprintf("%d IPs on %s", ips, holder), func() (bool, error) {
		bound, _ := w.Counts()
		return bound == ips, w.Err()
	}); err != nil {
		return res, err
	}
	for _, n := range e.nodes[1:] {
		if err := e.c.StartDaemon(n.Name, e.args...); err != nil {
			return res, err
		}
	}
	// The peers join: a few lease durations, in which sticky moves nothing.
	if err := pause(ctx, 3*defaultTiming.Lease); err != nil {
		return res, err
	}
	t0 := time.Now()
	if err := e.c.StopDaemon(holder, syscall.SIGTERM); err != nil {
		return res, err
	}
	res.Exited = time.Since(t0)
	survivor := func(ip netip.Addr) bool {
		for _, n := range w.BoundOn(ip) {
			if n != holder {
				return true
			}
		}
		return false
	}
	waitErr := waitFor(ctx, deadline, "every IP of "+holder+" on a survivor", func() (bool, error) {
		for _, ip := range addrs {
			if !survivor(ip) {
				return false, w.Err()
			}
		}
		return true, w.Err()
	})
	end := time.Now()
	for _, ip := range addrs {
		var left, bound time.Time
		spans := w.Spans(ip, end)
		for _, sp := range spans {
			if sp.Node == holder {
				left = maxTime(left, sp.To)
			} else if bound.IsZero() || sp.From.Before(bound) {
				bound = sp.From
			}
		}
		switch {
		case bound.IsZero():
			res.NotHandedOff++
		case !left.IsZero():
			gap := bound.Sub(left)
			res.Gap = append(res.Gap, gap.Seconds())
			if gap > handOff || gap < -handOff {
				res.NotHandedOff++
			}
		}
		// The stopped node's spans count: its address must be gone
		// before a survivor binds.
		if multiBound(spans, t0, end) > 0 {
			res.DoubleBound++
		}
	}
	e.log.Info("mass stop done", "node", holder, "ips", ips, "notHandedOff", res.NotHandedOff, "p99", Summarize(res.Gap).P99)
	return res, waitErr
}
