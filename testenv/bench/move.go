package bench

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/eip-project/eip/internal/lease"
	"github.com/eip-project/eip/testenv"
)

// Planned moves.
const (
	MoveRequest = "move"
	MoveSIGTERM = "SIGTERM"
)

// How a move is requested.
const (
	viaAnnotation = "eip.io/move-to on the lock"
	viaPlugin     = "kubectl eip move"
)

// moveSettle is how long the client keeps pinging after the new holder
// answered, to catch the old one answering again.
const moveSettle = 300 * time.Millisecond

// MoveSample is one planned move while the client pings the IP.
type MoveSample struct {
	Kind   string `json:"kind"`
	Method string `json:"method,omitempty"`
	IP     string `json:"ip"`
	From   string `json:"from"`
	To     string `json:"to"`
	// Gap is the longest interval without a reply.
	Gap time.Duration `json:"gap"`
	// Switch: the request (or signal) → the first reply from the new holder.
	Switch      time.Duration `json:"switch"`
	Lost        int           `json:"lost"`
	TwoMACs     int           `json:"twoMACs"`
	DoubleBound time.Duration `json:"doubleBound"`
	Error       string        `json:"error,omitempty"`
}

// moves runs reps moves and reps graceful shutdowns of the holder,
// alternating, under the default timing.
func (e *env) moves(ctx context.Context, reps int) ([]MoveSample, error) {
	e.log.Info("planned moves", "reps", reps)
	return oneIPSamples(ctx, e, defaultTiming, 2*reps, func(w *addrWatch, ip netip.Addr, i int) (MoveSample, error) {
		kind := MoveRequest
		if i%2 == 1 {
			kind = MoveSIGTERM
		}
		s, err := e.move(ctx, w, ip, kind)
		if err != nil {
			s.Error = err.Error()
			e.log.Warn("move failed; resetting", "kind", kind, "err", err)
			return s, err
		}
		e.log.Info("move", "kind", kind, "from", s.From, "to", s.To, "gap", s.Gap, "switch", s.Switch)
		return s, nil
	})
}

func (e *env) move(ctx context.Context, w *addrWatch, ip netip.Addr, kind string) (MoveSample, error) {
	s := MoveSample{Kind: kind, IP: ip.String()}
	p, err := e.c.Probe(ip, 0)
	if err != nil {
		return s, err
	}
	defer p.Stop()
	if s.From, err = e.served(ctx, p, ip); err != nil {
		return s, err
	}
	oldMAC := e.mac(s.From)
	var t0 time.Time
	switch kind {
	case MoveRequest:
		s.To = e.nextNode(s.From)
		t0 = time.Now()
		s.Method, err = e.requestMove(ctx, ip, s.To)
	case MoveSIGTERM:
		t0 = time.Now()
		err = e.c.StopDaemon(s.From, syscall.SIGTERM)
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
	s.Switch = first.At.Sub(t0)
	if to := e.nodeOfMAC(first.MAC); s.To == "" {
		s.To = to
	} else if to != s.To {
		return s, fmt.Errorf("moved to %s, asked for %s", to, s.To)
	}
	if err := pause(ctx, moveSettle); err != nil {
		return s, err
	}
	r := p.Stop()
	end := time.Now()
	s.Gap = r.LongestGap().Duration()
	s.Lost = r.Lost()
	s.TwoMACs = len(r.Overlaps())
	s.DoubleBound = multiBound(w.Spans(ip, end), t0, end)
	if kind == MoveSIGTERM {
		return s, e.startDaemon(ctx, s.From)
	}
	return s, nil
}

// nextNode is the node after node in the cluster's order, round.
func (e *env) nextNode(node string) string {
	names := e.nodeNames()
	for i, n := range names {
		if n == node {
			return names[(i+1)%len(names)]
		}
	}
	return names[0]
}

// requestMove asks the holder of ip to hand it to node: with kubectl eip
// move when the plugin works, else by writing the move annotation on the
// lock, as the plugin does. It returns which way it used.
func (e *env) requestMove(ctx context.Context, ip netip.Addr, node string) (string, error) {
	if e.plugin != "" {
		cmd, err := e.c.Command(ctx, testenv.Client, e.plugin, "--kubeconfig="+e.c.AdminKubeconfig(),
			"move", ip.String(), node, "--wait=false")
		if err != nil {
			return viaPlugin, err
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			return viaPlugin, fmt.Errorf("kubectl eip move: %w: %s", err, out)
		}
		return viaPlugin, nil
	}
	leases := e.k.CoordinationV1().Leases(testenv.Namespace)
	for {
		l, err := leases.Get(ctx, lease.NameFor(ip), metav1.GetOptions{})
		if err != nil {
			return viaAnnotation, fmt.Errorf("request move of %s: %w", ip, err)
		}
		_, err = leases.Update(ctx, lease.WithMoveTo(l, node), metav1.UpdateOptions{})
		if apierrors.IsConflict(err) && ctx.Err() == nil {
			continue
		}
		if err != nil {
			return viaAnnotation, fmt.Errorf("request move of %s: %w", ip, err)
		}
		return viaAnnotation, nil
	}
}

// pluginWorks reports whether bin is a kubectl-eip that has a status and a
// move command, and if not, why.
func pluginWorks(ctx context.Context, bin string) (bool, string) {
	if bin == "" {
		return false, "no kubectl-eip binary (KUBECTL_EIP_BIN)"
	}
	for _, sub := range []string{"status", "move"} {
		out, err := exec.CommandContext(ctx, bin, sub, "--help").CombinedOutput()
		if err != nil {
			return false, fmt.Sprintf("%s %s --help: %v: %s", bin, sub, err, firstLine(out))
		}
	}
	return true, ""
}

func firstLine(b []byte) string {
	for i, c := range b {
		if c == '\n' {
			return string(b[:i])
		}
	}
	return string(b)
}
