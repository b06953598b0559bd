package bench

import (
	"context"
	"fmt"
	"net/netip"
	"syscall"
	"time"
)

// Faults that take a holder away.
const (
	FaultKill = "SIGKILL"
	FaultCut  = "link cut"
)

// recoverySettle is how long the client keeps pinging after the lost node
// came back, to catch it answering again.
const recoverySettle = time.Second

// FailoverSample is one holder lost while the client pings its IP.
type FailoverSample struct {
	Fault  string `json:"fault"`
	Timing string `json:"timing"`
	IP     string `json:"ip"`
	From   string `json:"from"`
	To     string `json:"to"`
	// Failover: the fault → the first reply from another MAC.
	Failover time.Duration `json:"failover"`
	// Gap is the longest interval without a reply (a killed daemon's
	// address still answers until its lifetime ends, so Gap < Failover).
	Gap  time.Duration `json:"gap"`
	Lost int           `json:"lost"`
	// TwoMACs counts the intervals in which two MACs answered the client.
	TwoMACs int `json:"twoMACs"`
	// DoubleBound is how long the IP was on two nodes' interfaces, from
	// netlink events in the node namespaces.
	DoubleBound time.Duration `json:"doubleBound"`
	// OldGone: the fault → the address gone from the old holder; NewBound:
	// the fault → the address on the new holder.
	OldGone  time.Duration `json:"oldGone"`
	NewBound time.Duration `json:"newBound"`
	// AnswerARP lists the nodes answering an ARP request after the old
	// holder came back: exactly one.
	AnswerARP []string `json:"answerARP"`
	Error     string   `json:"error,omitempty"`
}

// failovers runs reps failovers per fault under timing, alternating the
// faults, each time taking away whichever node holds the IP.
func (e *env) failovers(ctx context.Context, timing Timing, faults []string, reps int) ([]FailoverSample, error) {
	e.log.Info("failover", "timing", timing.Name, "reps", reps)
	return oneIPSamples(ctx, e, timing, len(faults)*reps, func(w *addrWatch, ip netip.Addr, i int) (FailoverSample, error) {
		fault := faults[i%len(faults)]
		s, err := e.failover(ctx, w, ip, timing, fault)
		if err != nil {
			s.Error = err.Error()
			e.log.Warn("failover failed; resetting", "fault", fault, "err", err)
			return s, err
		}
		e.log.Info("failover", "fault", fault, "timing", timing.Name, "from", s.From, "to", s.To,
			"failover", s.Failover, "gap", s.Gap, "doubleBound", s.DoubleBound)
		return s, nil
	})
}

func (e *env) failover(ctx context.Context, w *addrWatch, ip netip.Addr, timing Timing, fault string) (FailoverSample, error) {
	s := FailoverSample{Fault: fault, Timing: timing.Name, IP: ip.String()}
	p, err := e.c.Probe(ip, 0)
	if err != nil {
		return s, err
	}
	defer p.Stop()
	if s.From, err = e.served(ctx, p, ip); err != nil {
		return s, err
	}
	if on := w.BoundOn(ip); len(on) != 1 || on[0] != s.From {
		return s, fmt.Errorf("%s held by %s but bound on %v", ip, s.From, on)
	}
	oldMAC := e.mac(s.From)

	t0 := time.Now()
	switch fault {
	case FaultKill:
		err = e.c.StopDaemon(s.From, syscall.SIGKILL)
	case FaultCut:
		err = e.c.CutLink(ctx, s.From)
	}
	if err != nil {
		return s, err
	}
	if err := waitFor(ctx, deadline, "a reply from another node", func() (bool, error) {
		_, ok := firstReplyAfter(p.Result(), t0, oldMAC)
		return ok, nil
	}); err != nil {
		return s, err
	}
	first, _ := firstReplyAfter(p.Result(), t0, oldMAC)
	s.Failover = first.At.Sub(t0)
	s.To = e.nodeOfMAC(first.MAC)

	recovered := time.Now()
	switch fault {
	case FaultKill:
		err = e.startDaemon(ctx, s.From)
	case FaultCut:
		if err = e.c.RestoreLink(ctx, s.From); err == nil {
			err = e.waitRenewed(ctx, s.From, recovered)
		}
	}
	if err != nil {
		return s, err
	}
	if err := pause(ctx, recoverySettle); err != nil {
		return s, err
	}
	r := p.Stop()
	end := time.Now()
	s.Gap = r.LongestGap().Duration()
	s.Lost = r.Lost()
	s.TwoMACs = len(r.Overlaps())
	spans := w.Spans(ip, end)
	s.DoubleBound = multiBound(spans, t0, end)
	for _, sp := range spans {
		switch {
		case sp.Node == s.From && !sp.From.After(t0) && sp.To.After(t0):
			s.OldGone = sp.To.Sub(t0)
		case sp.Node == s.To && sp.From.After(t0) && (s.NewBound == 0 || sp.From.Sub(t0) < s.NewBound):
			s.NewBound = sp.From.Sub(t0)
		}
	}
	macs, err := e.c.WhoAnswers(ip)
	if err != nil {
		return s, err
	}
	for _, m := range macs {
		s.AnswerARP = append(s.AnswerARP, e.nodeOfMAC(m))
	}
	return s, nil
}
