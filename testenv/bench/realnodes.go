package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"time"

	"github.com/eip-project/eip/testenv"
	"github.com/eip-project/eip/testenv/realnode"
	"github.com/eip-project/eip/testenv/workload"
)

// Kinds of planned disruptions on real nodes.
const (
	RealRollout   = "rollout restart"
	RealPodDelete = "pod delete"
)

// RealNodeSample is one disruption of eip installed from manifests/ on real
// kubelet nodes, as the client saw one of the web application's IPs.
type RealNodeSample struct {
	Kind string        `json:"kind"`
	IP   string        `json:"ip"`
	Gap  time.Duration `json:"gap"` // the longest ping gap
	// TwoMACs counts moments two MACs answered; HTTPFailed the failed HTTP
	// requests (in flight while the IP moved, or not: see HTTPOutside),
	// HTTPRequests all of them.
	TwoMACs      int `json:"twoMACs"`
	HTTPFailed   int `json:"httpFailed"`
	HTTPOutside  int `json:"httpOutside"`
	HTTPRequests int `json:"httpRequests"`
	// OutsideErrors are the errors of the first few HTTPOutside requests.
	OutsideErrors []string `json:"outsideErrors,omitempty"`
	// Of an eTP=Local move (workload.LocalMove): from the new pod ready
	// to the IP's lock seen naming its node, from then and from the action
	// to its node answering; how long no endpoint served. HTTPOutside are
	// then the requests failed while one served.
	ReadyToHeld    time.Duration `json:"readyToHeld,omitempty"`
	ReadyToAnswer  time.Duration `json:"readyToAnswer,omitempty"`
	ActionToAnswer time.Duration `json:"actionToAnswer,omitempty"`
	NoneServing    time.Duration `json:"noneServing,omitempty"`
	Error          string        `json:"error,omitempty"`
}

// realNodeGaps starts a cluster of three real nodes, installs eip with
// `kubectl apply -k manifests/` and the web application, and measures reps
// rollout restarts of eipd's DaemonSet and reps deletions of the holder's
// eipd pod, with the client's pings and HTTP on both IPs, then the moves
// of an eTP=Local Service's pod (measureRealLocal).
func realNodeGaps(ctx context.Context, log *slog.Logger, reps int) ([]RealNodeSample, error) {
	opts := testenv.Options{Nodes: 3, RealNodes: true, Manifests: []string{}, Logger: log}
	if err := testenv.Prerequisites(opts); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "eip-bench-realnodes-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	img, err := workload.EipdImage(ctx, dir, "bench", true)
	if err != nil {
		return nil, err
	}
	opts.Images = []realnode.Image{img}
	c, err := testenv.Start(ctx, opts)
	if err != nil {
		return nil, err
	}
	samples, err := measureRealNodes(ctx, c, reps)
	if err != nil {
		c.Keep()
		log.Error("real nodes: logs kept", "dir", c.Dir())
	}
	return samples, errors.Join(err, c.Close())
}

// realStep bounds each step on the real nodes (an installation, a
// rollout, a pod's move): a kubelet, containerd or eipd that stops making
// progress fails the benchmark with the step it hung in, instead of
// hanging it. Each step takes seconds to a minute or two when it works.
const realStep = 5 * time.Minute

// step runs fn with a context that ends realStep from now.
func step[T any](ctx context.Context, what string, fn func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, realStep)
	defer cancel()
	v, err := fn(ctx)
	if err != nil {
		err = fmt.Errorf("%s: %w", what, err)
	}
	return v, err
}

func measureRealNodes(ctx context.Context, c *testenv.Cluster, reps int) ([]RealNodeSample, error) {
	if _, err := step(ctx, "install eip", func(ctx context.Context) (struct{}, error) {
		return struct{}{}, workload.InstallEIP(ctx, c)
	}); err != nil {
		return nil, err
	}
	lbIP, err := step(ctx, "deploy the web application", func(ctx context.Context) (netip.Addr, error) {
		return workload.DeployWeb(ctx, c)
	})
	if err != nil {
		return nil, err
	}
	ips := []netip.Addr{workload.ExternalIP, lbIP}
	actions := map[string]func(ctx context.Context) error{
		RealRollout: func(ctx context.Context) error {
			if _, err := c.Kubectl(ctx, "-n", testenv.Namespace, "rollout", "restart", "daemonset/eipd"); err != nil {
				return err
			}
			return workload.WaitDaemonSet(ctx, c)
		},
		RealPodDelete: func(ctx context.Context) error {
			h, err := workload.Holder(ctx, c, workload.ExternalIP)
			if err != nil {
				return err
			}
			pod, err := workload.EipdPod(ctx, c, h)
			if err != nil {
				return err
			}
			if _, err := c.Kubectl(ctx, "-n", testenv.Namespace, "delete", "pod", pod, "--wait=true"); err != nil {
				return err
			}
			return workload.WaitDaemonSet(ctx, c)
		},
	}
	var samples []RealNodeSample
	for _, kind := range []string{RealRollout, RealPodDelete} {
		for range reps {
			s, err := step(ctx, kind, func(ctx context.Context) ([]RealNodeSample, error) {
				return disrupt(ctx, c, ips, kind, actions[kind])
			})
			if err != nil {
				return samples, err
			}
			samples = append(samples, s...)
		}
	}
	local, err := measureRealLocal(ctx, c, reps)
	return append(samples, local...), err
}

// disrupt runs one disruption with traffic to every IP and returns a sample
// per IP.
func disrupt(ctx context.Context, c *testenv.Cluster, ips []netip.Addr, kind string, action func(context.Context) error) ([]RealNodeSample, error) {
	var trs []*workload.Traffic
	defer func() {
		for _, tr := range trs {
			tr.Finish()
		}
	}()
	for _, ip := range ips {
		tr, err := workload.StartTraffic(c, ip)
		if err != nil {
			return nil, err
		}
		trs = append(trs, tr)
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		err = tr.WaitAnswering(wctx)
		cancel()
		if err != nil {
			return nil, err
		}
	}
	if err := action(ctx); err != nil {
		return nil, err
	}
	time.Sleep(time.Second) // the client sees the final state too
	var out []RealNodeSample
	for _, tr := range trs {
		s := tr.Finish()
		outside := s.FailedOutsideMoves(100 * time.Millisecond)
		sample := RealNodeSample{
			Kind: kind, IP: s.IP.String(), Gap: s.Pings.LongestGap().Duration(),
			TwoMACs: len(workload.TwoMACs(s.Pings)), HTTPFailed: len(s.Failed()),
			HTTPOutside: len(outside), HTTPRequests: len(s.Requests),
		}
		for _, r := range outside[:min(len(outside), 3)] {
			sample.OutsideErrors = append(sample.OutsideErrors, r.Start.Format(time.StampMilli)+": "+r.Err.Error())
		}
		out = append(out, sample)
	}
	return out, nil
}

// realNodeFigures are the gap rows of the real-node samples, and the rows
// of the eTP=Local moves (realLocalFigures).
func realNodeFigures(samples []RealNodeSample) []Figure {
	var figs []Figure
	for _, kind := range []string{RealRollout, RealPodDelete} {
		var gaps, failed []float64
		for _, s := range samples {
			if s.Kind == kind {
				gaps = append(gaps, millis(s.Gap))
				failed = append(failed, float64(s.HTTPOutside))
			}
		}
		if len(gaps) == 0 {
			continue
		}
		figs = append(figs,
			NewFigure("longest gap, "+kind+", real nodes", UnitMillis, gaps, Target{Stat: "max", Limit: 100}),
			NewFigure("HTTP failed outside moves, "+kind+", real nodes", UnitCount, failed, Target{Stat: "max", Limit: 0}))
	}
	return append(figs, realLocalFigures(samples)...)
}
