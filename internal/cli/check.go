package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"

	"github.com/eip-project/eip/internal/lease"
	"github.com/eip-project/eip/internal/wire"
)

// checkPoll is how often check reads the checking nodes' heartbeats while
// it waits for their answers.
const checkPoll = 200 * time.Millisecond

// requestAttempts bounds how often writing a check request is retried after
// the node renewed its heartbeat in between.
const requestAttempts = 5

// CheckOptions are the flags and arguments of `kubectl eip check`.
type CheckOptions struct {
	*env
	Timeout time.Duration

	invocation
	ips []netip.Addr
}

func newCheckCommand(e *env) *cobra.Command {
	o := &CheckOptions{env: e, Timeout: 30 * time.Second}
	cmd := &cobra.Command{
		Use:   "check [IP...]",
		Short: "Check on the LAN that each external IP is answered by its holder alone",
		Long: `Ask the nodes that check the wire for a fresh check of every external IP
(or of those given), wait for their answers, and print each IP's verdict:
holder (answered by its holder alone), none (nobody answered), stranger (a
machine that is not the holder answered), two-macs (two machines answered)
or unchecked (no node checks it: it has no live successor).

Each IP is checked by the node its lock names as successor, with an ARP
probe or a neighbour solicitation on the IP's interface. The command exits
non-zero, naming the IP and its verdict, unless every IP is answered by its
holder alone; an IP no node holds counts as not answered.`,
		Example: `  kubectl eip check
  kubectl eip check 198.18.100.1 2001:db8::100:1 --timeout 1m`,
		ValidArgsFunction: e.completeFrom(statusChoices),
		RunE:              runE(o),
	}
	cmd.Flags().DurationVar(&o.Timeout, "timeout", o.Timeout, "how long to wait for the checking nodes' answers")
	return cmd
}

// Complete takes the arguments and the namespace from the flags.
func (o *CheckOptions) Complete(args []string) error {
	o.complete(o.env, args)
	return nil
}

// Validate checks the arguments and flags before any request.
func (o *CheckOptions) Validate() error {
	if o.Timeout <= 0 {
		return fmt.Errorf("--timeout must be positive, not %s", o.Timeout)
	}
	var err error
	o.ips, err = parseIPs(o.args)
	return err
}

// Run asks for a fresh check, waits for it, prints the verdicts and fails
// unless each IP is answered by its holder alone.
func (o *CheckOptions) Run(ctx context.Context) error {
	c, s, err := o.connect(ctx, o.namespace)
	if err != nil {
		return err
	}
	st, err := filterIPs(buildStatus(s, o.clock.Now()), o.ips)
	if err != nil {
		return err
	}
	leases := c.CoordinationV1().Leases(o.namespace)
	token := strconv.FormatInt(o.clock.Now().UnixNano(), 36)
	checkers := checkersOf(st)
	for _, n := range checkers {
		if err := requestCheck(ctx, leases, n, token); err != nil {
			return err
		}
	}
	if err := o.awaitChecks(ctx, leases, checkers, token); err != nil {
		return err
	}
	s, err = o.read(ctx, c, o.namespace)
	if err != nil {
		return err
	}
	st, err = filterIPs(buildStatus(s, o.clock.Now()), o.ips)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	failed := printCheck(&buf, st)
	if _, err := o.Out.Write(buf.Bytes()); err != nil {
		return err
	}
	return failed
}

// checked says whether check covers r: a Service names it and a node
// should answer for it.
func checked(r IP) bool {
	switch r.State {
	case StateBound, StateMoving, StateUnbound, StateConflict:
		return true
	}
	return false
}

// checkersOf are the live nodes that check the IPs of st: their
// successors.
func checkersOf(st Status) []string {
	alive := map[string]bool{}
	for _, n := range st.Nodes {
		alive[n.Name] = n.Alive
	}
	var out []string
	for _, r := range st.IPs {
		if checked(r) && r.State == StateBound && r.Successor != "" && r.Successor != r.Holder && alive[r.Successor] && !slices.Contains(out, r.Successor) {
			out = append(out, r.Successor)
		}
	}
	slices.Sort(out)
	return out
}

// requestCheck writes token into node's heartbeat as a check request. The
// node renews it meanwhile, so a write that lost the race is tried again
// on the current version.
func requestCheck(ctx context.Context, leases coordinationv1client.LeaseInterface, node, token string) error {
	name := lease.HeartbeatName(node)
	var err error
	for range requestAttempts {
		l, gerr := leases.Get(ctx, name, metav1.GetOptions{})
		if gerr != nil {
			return fmt.Errorf("ask %s for a check: %w", node, gerr)
		}
		if l.Annotations == nil {
			l.Annotations = map[string]string{}
		}
		l.Annotations[lease.AnnotationCheckRequest] = token
		if _, err = leases.Update(ctx, l, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("ask %s for a check: %w", node, err)
	}
	return nil
}

// awaitChecks waits until every checker's heartbeat answers token.
func (o *CheckOptions) awaitChecks(ctx context.Context, leases coordinationv1client.LeaseInterface, checkers []string, token string) error {
	deadline := o.clock.Now().Add(o.Timeout)
	ticker := o.clock.NewTicker(checkPoll)
	defer ticker.Stop()
	for {
		var waiting []string
		for _, n := range checkers {
			l, err := leases.Get(ctx, lease.HeartbeatName(n), metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("read the check of %s: %w", n, err)
			}
			if l.Annotations[lease.AnnotationCheckDone] != token {
				waiting = append(waiting, n)
			}
		}
		if len(waiting) == 0 {
			return nil
		}
		if !o.clock.Now().Before(deadline) {
			return fmt.Errorf("no fresh check from %v within %s: their eipd may be older than the check, or busy", waiting, o.Timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ticker.C():
		}
	}
}

// printCheck writes each IP's verdict and returns an error naming every IP
// not answered by its holder alone, nil when there is none.
func printCheck(w *bytes.Buffer, st Status) error {
	nodes := make(map[string]*Node, len(st.Nodes))
	for i := range st.Nodes {
		nodes[st.Nodes[i].Name] = &st.Nodes[i]
	}
	var rows [][]string
	var errs error
	for _, r := range st.IPs {
		if !checked(r) {
			continue
		}
		rows = append(rows, []string{r.IP, orNone(r.Holder), string(r.State), wireCell(st.ObservedAt, r.Wire), orDash(r.strangerMAC(nodes[r.Holder]))})
		if r.State != StateBound || !r.answeredAlone() {
			errs = errors.Join(errs, fmt.Errorf("%s: %s", r.IP, checkVerdict(r)))
		}
	}
	if len(rows) == 0 {
		w.WriteString("No external IPs to check.\n")
		return nil
	}
	writeTable(w, []string{"IP", "HOLDER", "STATE", "WIRE", "OTHER MAC"}, rows)
	if errs != nil {
		return fmt.Errorf("not answered by their holder alone:\n%w", errs)
	}
	return nil
}

// checkVerdict says in words why r is not answered by its holder alone.
func checkVerdict(r IP) string {
	w := r.Wire
	switch {
	case r.State != StateBound:
		return "state " + string(r.State) + ": no node answers for it as its holder"
	case w.Verdict == wire.Unchecked.String() && w.By == "":
		return "unchecked: no live node other than its holder checks it"
	case w.By == "":
		return w.Verdict
	}
	s := w.Verdict + " as " + w.By + " hears it"
	if len(w.MACs) > 0 {
		s += " (answered by " + fmt.Sprint(w.MACs) + ")"
	}
	if w.Deaf {
		s += "; " + w.By + " heard no answer to any check for a while"
	}
	return s
}
