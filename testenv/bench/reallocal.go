package bench

import (
	"context"
	"net/netip"
	"time"

	"github.com/eip-project/eip/testenv"
	"github.com/eip-project/eip/testenv/workload"
)

// Kinds of eTP=Local moves on real nodes.
const (
	RealLocalDelete = "eTP=Local pod delete"
	RealLocalScale  = "eTP=Local scale 0→1"
)

// measureRealLocal measures reps moves of the one pod of an eTP=Local
// Service to another node (deleted, its node tainted) and reps scales of
// it to zero and back, with the client's HTTP on its IP.
func measureRealLocal(ctx context.Context, c *testenv.Cluster, reps int) ([]RealNodeSample, error) {
	const name = "bench-local"
	ip, err := step(ctx, "deploy "+name, func(ctx context.Context) (netip.Addr, error) {
		return workload.DeployLocal(ctx, c, name, 1)
	})
	if err != nil {
		return nil, err
	}
	var out []RealNodeSample
	for range reps {
		m, err := step(ctx, RealLocalDelete, func(ctx context.Context) (workload.LocalMove, error) {
			return workload.MoveLocalPod(ctx, c, name, ip)
		})
		if err != nil {
			return out, err
		}
		out = append(out, localSample(RealLocalDelete, m))
	}
	for range reps {
		m, err := step(ctx, RealLocalScale, func(ctx context.Context) (workload.LocalMove, error) {
			if _, err := workload.ScaleToZero(ctx, c, name, ip); err != nil {
				return workload.LocalMove{}, err
			}
			return workload.ScaleBack(ctx, c, name, ip)
		})
		if err != nil {
			return out, err
		}
		out = append(out, localSample(RealLocalScale, m))
	}
	return out, nil
}

func localSample(kind string, m workload.LocalMove) RealNodeSample {
	s := RealNodeSample{
		Kind: kind, IP: m.Seen.IP.String(), Gap: m.Seen.Pings.LongestGap().Duration(),
		TwoMACs: len(workload.TwoMACs(m.Seen.Pings)), HTTPFailed: len(m.Seen.Failed()),
		HTTPOutside: len(m.Unexplained()), HTTPRequests: len(m.Seen.Requests),
		ReadyToHeld: m.Held.Sub(m.Ready), ReadyToAnswer: m.ReadyToAnswer(), ActionToAnswer: m.ActionToAnswer(), NoneServing: m.NoneServing,
	}
	for _, r := range m.Unexplained()[:min(len(m.Unexplained()), 3)] {
		s.OutsideErrors = append(s.OutsideErrors, r.Start.Format(time.StampMilli)+": "+r.Err.Error())
	}
	return s
}

// realLocalFigures are the rows of the eTP=Local samples: how long after
// the new pod was ready (by its EndpointSlice) the IP's lock named its
// node, how long after that and after the action the node answered, and
// the requests that failed while an endpoint served.
func realLocalFigures(samples []RealNodeSample) []Figure {
	var figs []Figure
	for _, kind := range []string{RealLocalDelete, RealLocalScale} {
		var held, ready, action, none, failed []float64
		for _, s := range samples {
			if s.Kind == kind {
				held = append(held, millis(s.ReadyToHeld))
				none = append(none, millis(s.NoneServing))
				ready = append(ready, millis(s.ReadyToAnswer))
				action = append(action, millis(s.ActionToAnswer))
				failed = append(failed, float64(s.HTTPOutside))
			}
		}
		if len(ready) == 0 {
			continue
		}
		figs = append(figs,
			NewFigure("pod ready → the IP's lock names its node, "+kind+", real nodes", UnitMillis, held, Target{}),
			NewFigure("pod ready → its node answers, "+kind+", real nodes", UnitMillis, ready, Target{}),
			NewFigure("action → the new pod's node answers, "+kind+", real nodes", UnitMillis, action, Target{}),
			NewFigure("no endpoint served anywhere, "+kind+", real nodes", UnitMillis, none, Target{}),
			NewFigure("HTTP failed while an endpoint served, "+kind+", real nodes", UnitCount, failed, Target{Stat: "max", Limit: 0}))
	}
	return figs
}
