package bench

import (
	"context"
	"fmt"
	"net/netip"
	"syscall"
	"time"

	"github.com/eip-project/eip/testenv"
)

// Route mode through the testenv router (testenv.Options.Router): the
// routed client pings an IP of routedRange, which it reaches only through
// the routes the router learned over BGP, while the IP's holder is killed
// with its link cut, or while the IP is moved. The router keeps BGP's
// default hold time of 90 s, so a dead holder's route stays listed there
// for that long: the samples say whether it still was when the client was
// answered again.

// Kinds of BGP samples.
const (
	BGPFailover = "SIGKILL + link cut"
	BGPMove     = "move"
)

// BGPSample is one change of holder of a route-mode IP, as the routed
// client saw it.
type BGPSample struct {
	Kind   string `json:"kind"`
	Method string `json:"method,omitempty"`
	IP     string `json:"ip"`
	From   string `json:"from"`
	To     string `json:"to"`
	// Answered: the link cut → the first reply to a request sent after it
	// (failover only; the old holder answers a move until it withdraws).
	Answered time.Duration `json:"answered,omitempty"`
	// Gap is the longest interval without a reply.
	Gap  time.Duration `json:"gap"`
	Lost int           `json:"lost"`
	// StalePath: when the client was answered again, the router still
	// listed the dead holder's path beside the new holder's best one.
	StalePath bool `json:"stalePath,omitempty"`
	// DoubleBound is how long the IP was on two nodes.
	DoubleBound time.Duration `json:"doubleBound"`
	Error       string        `json:"error,omitempty"`
}

// bgpHandovers runs reps failovers and reps moves of a route-mode IP,
// alternating.
func (e *env) bgpHandovers(ctx context.Context, reps int) ([]BGPSample, error) {
	e.log.Info("route mode", "reps", reps)
	return oneIPSamples(ctx, e, routedTiming, 2*reps, func(w *addrWatch, ip netip.Addr, i int) (BGPSample, error) {
		kind := BGPFailover
		if i%2 == 1 {
			kind = BGPMove
		}
		s, err := e.bgpHandover(ctx, w, ip, kind)
		if err != nil {
			s.Error = err.Error()
			e.log.Warn("route mode sample failed; resetting", "kind", kind, "err", err)
			return s, err
		}
		e.log.Info("route mode", "kind", kind, "from", s.From, "to", s.To, "answered", s.Answered, "gap", s.Gap, "stalePath", s.StalePath)
		return s, nil
	})
}

func (e *env) bgpHandover(ctx context.Context, w *addrWatch, ip netip.Addr, kind string) (BGPSample, error) {
	s := BGPSample{Kind: kind, IP: ip.String()}
	p, err := e.c.RoutedProbe(ip, 0)
	if err != nil {
		return s, err
	}
	defer p.Stop()
	if s.From, err = e.routedAt(ctx, p, ip, ""); err != nil {
		return s, err
	}
	var t0 time.Time
	var after int // requests from this sequence number on were sent after t0
	switch kind {
	case BGPFailover:
		// t0 is when the link is down: replies to later requests came
		// through another node.
		if err = e.c.CutLink(ctx, s.From); err == nil {
			t0, after = time.Now(), p.Result().Sent
			err = e.c.StopDaemon(s.From, syscall.SIGKILL)
		}
	case BGPMove:
		s.To = e.nextNode(s.From)
		t0 = time.Now()
		s.Method, err = e.requestMove(ctx, ip, s.To)
	}
	if err != nil {
		return s, err
	}

	if kind == BGPFailover {
		var first testenv.Reply
		if err := waitFor(ctx, deadline, "a reply to a request sent after the fault", func() (bool, error) {
			var ok bool
			first, ok = replyFrom(p.Result(), after)
			return ok, nil
		}); err != nil {
			return s, err
		}
		s.Answered = first.At.Sub(t0)
		paths, err := e.c.BGPPaths(ctx, ip)
		if err != nil {
			return s, err
		}
		for _, path := range paths {
			s.StalePath = s.StalePath || path.Node == s.From && !path.Best
		}
	}
	to, err := e.routedAt(ctx, p, ip, s.From)
	if err != nil {
		return s, err
	}
	if s.To != "" && to != s.To {
		return s, fmt.Errorf("moved to %s, asked for %s", to, s.To)
	}
	s.To = to

	if kind == BGPFailover {
		if err := e.c.RestoreLink(ctx, s.From); err != nil {
			return s, err
		}
		if err := e.c.RestartBGPSession(ctx, s.From); err != nil {
			return s, err
		}
		if err := e.startDaemon(ctx, s.From); err != nil {
			return s, err
		}
		if err := e.peered(ctx, s.From); err != nil {
			return s, err
		}
	}
	if err := pause(ctx, moveSettle); err != nil {
		return s, err
	}
	r := p.Stop()
	end := time.Now()
	s.Gap = r.LongestGap().Duration()
	s.Lost = r.Lost()
	s.DoubleBound = multiBound(w.Spans(ip, end), t0, end)
	return s, nil
}

// replyFrom is the first reply to a request numbered seq or later.
func replyFrom(r testenv.ProbeResult, seq int) (testenv.Reply, bool) {
	for _, rep := range r.Replies {
		if rep.Seq >= seq {
			return rep, true
		}
	}
	return testenv.Reply{}, false
}

// routedAt waits until ip has a holder other than not, the router's one
// best path for ip is that holder's, and the routed client's latest reply
// is less than 100 ms old. It returns the holder.
func (e *env) routedAt(ctx context.Context, p *testenv.Probe, ip netip.Addr, not string) (string, error) {
	var holder string
	err := waitFor(ctx, deadline, ip.String()+" routed to its holder", func() (bool, error) {
		h, err := e.holder(ctx, ip)
		if err != nil || h == "" || h == not {
			return false, err
		}
		r := p.Result()
		if len(r.Replies) == 0 || time.Since(r.Replies[len(r.Replies)-1].At) >= 100*time.Millisecond {
			return false, nil
		}
		// birdc fails now and then while it is polled this often (BIRD's
		// control socket turns a connection away): ask again.
		paths, err := e.c.BGPPaths(ctx, ip)
		if err != nil {
			return false, nil
		}
		var best []string
		for _, path := range paths {
			if path.Best {
				best = append(best, path.Node)
			}
		}
		holder = h
		return len(best) == 1 && best[0] == h, nil
	})
	return holder, err
}

// peered waits until the router's session with each node is established.
func (e *env) peered(ctx context.Context, nodes ...string) error {
	return waitFor(ctx, deadline, fmt.Sprintf("BGP sessions of %v", nodes), func() (bool, error) {
		states, err := e.c.BGPSessions(ctx)
		if err != nil {
			return false, nil // as in routedAt
		}
		for _, n := range nodes {
			if states[n] != "Established" {
				return false, nil
			}
		}
		return true, nil
	})
}
