package bench

import (
	"context"
	"net/netip"
	"time"
)

// BindSample is one Service created while the client already pings its IP.
type BindSample struct {
	IP string `json:"ip"`
	// Latency: the Create request sent → the first reply.
	Latency time.Duration `json:"latency"`
	Holder  string        `json:"holder"`
	Error   string        `json:"error,omitempty"`
}

// bindLatency creates reps Services, one at a time, each naming a new IP
// that the client pings from just before the Service is created.
func (e *env) bindLatency(ctx context.Context, reps int) ([]BindSample, error) {
	e.log.Info("bind latency", "reps", reps)
	if err := e.reset(ctx, defaultTiming, true); err != nil {
		return nil, err
	}
	var out []BindSample
	for range reps {
		s, err := e.bindOnce(ctx)
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
		if err != nil {
			s.Error = err.Error()
			e.log.Warn("bind failed", "ip", s.IP, "err", err)
		} else {
			e.log.Info("bind", "ip", s.IP, "latency", s.Latency, "holder", s.Holder)
		}
		out = append(out, s)
	}
	return out, nil
}

func (e *env) bindOnce(ctx context.Context) (BindSample, error) {
	ip := e.pingIP(defaultTiming)
	s := BindSample{IP: ip.String()}
	p, err := e.c.Probe(ip, 0)
	if err != nil {
		return s, err
	}
	defer p.Stop()
	t0 := time.Now()
	if err := e.createServices(ctx, []netip.Addr{ip}); err != nil {
		return s, err
	}
	if err := waitFor(ctx, deadline, ip.String()+" answering", func() (bool, error) {
		return len(p.Result().Replies) > 0, nil
	}); err != nil {
		return s, err
	}
	first := p.Result().Replies[0]
	s.Latency = first.At.Sub(t0)
	s.Holder = e.nodeOfMAC(first.MAC)
	return s, nil
}
