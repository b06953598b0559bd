package cli

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/spf13/cobra"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/watch"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/utils/clock"

	"github.com/eip-project/eip/internal/lease"
)

// moveAttempts bounds how often a move request is retried after losing a
// write race on the lock (someone else wrote it in between).
const moveAttempts = 3

// MoveOptions are the flags and arguments of `kubectl eip move`.
type MoveOptions struct {
	*env
	Timeout time.Duration
	Wait    bool

	invocation
	ip   netip.Addr
	node string
}

func newMoveCommand(e *env) *cobra.Command {
	o := &MoveOptions{env: e, Timeout: 10 * time.Second, Wait: true}
	cmd := &cobra.Command{
		Use:   "move <ip> <node>",
		Short: "Hand an external IP to another node",
		Long: `Hand an external IP to another node and wait until that node holds it.

The IP must be managed by eip, and the node must run a live, eligible eip
daemon. The plugin asks the IP's holder through the IP's lock; the holder
unbinds the IP and names the node as holder in one write, and the node binds
it at once. When the holder is dead, the node takes the IP directly. With the
sticky policy the IP then stays on that node while it lives.

The time printed runs from writing the request to seeing the lock name the
node, which binds the IP within milliseconds of that write.

On timeout, or when watching the lock fails, the request is withdrawn, so
that it cannot take effect later; a request someone else wrote meanwhile
stays.`,
		Example: `  kubectl eip move 198.18.100.1 node-2
  kubectl eip move 2001:db8::100:1 node-3 --timeout 30s
  kubectl eip move 198.18.100.1 node-2 --wait=false`,
		ValidArgsFunction: e.completeFrom(moveChoices),
		RunE:              runE(o),
	}
	cmd.Flags().DurationVar(&o.Timeout, "timeout", o.Timeout, "how long to wait for the node to hold the IP")
	cmd.Flags().BoolVar(&o.Wait, "wait", o.Wait, "wait until the node holds the IP; false returns once the request is written")
	return cmd
}

// Complete takes the arguments and the namespace from the flags.
func (o *MoveOptions) Complete(args []string) error {
	o.complete(o.env, args)
	return nil
}

// Validate checks the arguments and flags before any request.
func (o *MoveOptions) Validate() error {
	if len(o.args) != 2 {
		return fmt.Errorf("move takes an IP and a node, got %d argument(s): kubectl eip move <ip> <node>", len(o.args))
	}
	ip, err := parseIP(o.args[0])
	if err != nil {
		return err
	}
	if o.args[1] == "" {
		return errors.New("the node name is empty")
	}
	if o.Wait && o.Timeout <= 0 {
		return fmt.Errorf("--timeout must be positive, not %s", o.Timeout)
	}
	o.ip, o.node = ip, o.args[1]
	return nil
}

// Run checks the IP and the node against the cluster, requests the move and
// waits for it.
func (o *MoveOptions) Run(ctx context.Context) error {
	c, s, err := o.connect(ctx, o.namespace)
	if err != nil {
		return err
	}
	name, err := planMove(s, buildStatus(s, o.clock.Now()), o.ip, o.node)
	if err != nil {
		return err
	}
	leases := c.CoordinationV1().Leases(o.namespace)
	start := o.clock.Now()
	written, from, err := o.request(ctx, leases, name)
	if err != nil {
		return err
	}
	if !o.Wait {
		fmt.Fprintf(o.Out, "requested move of %s%s to %s\n", o.ip, fromText(from), o.node)
		return nil
	}
	if err := o.await(ctx, leases, written, from); err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "moved %s%s to %s in %s\n", o.ip, fromText(from), o.node, o.clock.Since(start).Round(time.Millisecond))
	return nil
}

func fromText(from string) string {
	if from == "" {
		return ""
	}
	return " from " + escapeControls(from)
}

// planMove checks that ip may move to node and returns the name of its
// lock. It is the whole of the plugin's validation; the holder checks again
// (alive and eligible, in its own judgement) before it acts.
func planMove(s snapshot, st Status, ip netip.Addr, node string) (string, error) {
	var row *IP
	for i := range st.IPs {
		if st.IPs[i].addr == ip {
			row = &st.IPs[i]
		}
	}
	switch {
	case row == nil:
		return "", notManaged(ip)
	case row.State == StateOutOfRange || row.State == StateRefused:
		return "", fmt.Errorf("%s is not managed by eip: %s names it, but %s", ip, strings.Join(row.Services, ","), row.Reason)
	case row.State == StateOrphan:
		return "", fmt.Errorf("%s is not managed by eip: no Service names it any more, and its lock is being deleted", ip)
	case row.Lock == "":
		return "", fmt.Errorf("%s has no lock yet: no node has taken it; try again in a moment", ip)
	}
	if err := checkTarget(s, st, node); err != nil {
		return "", err
	}
	if row.Holder == node {
		return "", fmt.Errorf("%s is already on %s", ip, node)
	}
	return row.Lock, nil
}

// checkTarget says why node cannot take an IP, or nil.
func checkTarget(s snapshot, st Status, node string) error {
	var n *Node
	for i := range st.Nodes {
		if st.Nodes[i].Name == node {
			n = &st.Nodes[i]
		}
	}
	known := false
	for _, obj := range s.nodes {
		known = known || obj.Name == node
	}
	switch {
	case (n == nil || !n.heartbeat) && !known:
		return fmt.Errorf("node %q not found", node)
	case n == nil || !n.heartbeat:
		return fmt.Errorf("%s does not run eip: no heartbeat %s in namespace %s", node, lease.HeartbeatName(node), s.namespace)
	case !n.Alive:
		since := "never"
		if n.LastRenewTime != nil {
			since = duration.HumanDuration(max(st.ObservedAt.Sub(*n.LastRenewTime), 0)) + " ago"
		}
		return fmt.Errorf("%s is not alive: its heartbeat was last renewed %s (lease duration %ds)", node, since, n.LeaseDurationSeconds)
	case !n.Eligible:
		return fmt.Errorf("%s is not eligible: %s", node, n.message())
	}
	return nil
}

// request reads the lock whole (status reads only part of it) and writes
// the move request on it with its resourceVersion as precondition. When
// someone wrote the lock in between, it reads the lock again and retries,
// unless the IP is already where it should go. It returns the written lock
// and the holder it asked.
func (o *MoveOptions) request(ctx context.Context, leases coordinationv1client.LeaseInterface, name string) (*coordinationv1.Lease, string, error) {
	for attempt := 1; ; attempt++ {
		l, err := o.reread(ctx, leases, name)
		if err != nil {
			return nil, "", err
		}
		from := holderOf(l)
		if from == o.node {
			return nil, "", fmt.Errorf("%s is already on %s", o.ip, o.node)
		}
		out, err := leases.Update(ctx, lease.WithMoveTo(l, o.node), metav1.UpdateOptions{})
		if err == nil {
			return out, from, nil
		}
		if !apierrors.IsConflict(err) || attempt == moveAttempts {
			return nil, "", fmt.Errorf("request move of %s to %s on lease %s/%s: %w", o.ip, o.node, o.namespace, name, err)
		}
	}
}

func (o *MoveOptions) reread(ctx context.Context, leases coordinationv1client.LeaseInterface, name string) (*coordinationv1.Lease, error) {
	l, err := leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("the lock of %s was deleted: no Service names it any more", o.ip)
	}
	if err != nil {
		return nil, fmt.Errorf("get lease %s/%s: %w", o.namespace, name, err)
	}
	return l, nil
}

// await watches the lock until the target holds it, the move fails, or the
// timeout passes; on timeout it withdraws the request.
func (o *MoveOptions) await(ctx context.Context, leases coordinationv1client.LeaseInterface, written *coordinationv1.Lease, from string) error {
	timer := o.clock.NewTimer(o.Timeout)
	defer timer.Stop()
	name, rv := written.Name, written.ResourceVersion
	for {
		w, err := leases.Watch(ctx, metav1.ListOptions{
			FieldSelector:   fields.OneTermEqualSelector("metadata.name", name).String(),
			ResourceVersion: rv,
		})
		if err != nil {
			if ctx.Err() != nil {
				return o.interrupted(name)
			}
			// Nobody would see the request through.
			return o.withdraw(ctx, leases, name, from, fmt.Errorf("watch lease %s/%s: %w", o.namespace, name, err))
		}
		// What happened before the watch began; the watch brings the rest.
		l, err := o.reread(ctx, leases, name)
		if err != nil {
			w.Stop()
			return err
		}
		rv = l.ResourceVersion
		done, err := moveOutcome(l, o.ip, from, o.node)
		if !done && err == nil {
			done, err = o.follow(ctx, leases, w, timer, name, from, &rv)
		}
		w.Stop()
		if done || err != nil {
			return err
		}
	}
}

// follow judges every change of the lock from w. It returns false and nil
// when the watch ended, to be watched again from *rv.
func (o *MoveOptions) follow(ctx context.Context, leases coordinationv1client.LeaseInterface, w watch.Interface, timer clock.Timer, name, from string, rv *string) (bool, error) {
	for {
		select {
		case <-ctx.Done():
			return false, o.interrupted(name)
		case <-timer.C():
			err := o.withdraw(ctx, leases, name, from, fmt.Errorf("timed out after %s: %s is still on %s, not %s", o.Timeout, o.ip, orNone(from), o.node))
			return err == nil, err
		case ev, open := <-w.ResultChan():
			if !open || ev.Type == watch.Error {
				return false, nil
			}
			l, ok := ev.Object.(*coordinationv1.Lease)
			if !ok || l.Name != name {
				continue
			}
			if ev.Type == watch.Deleted {
				return false, fmt.Errorf("the lock of %s was deleted while moving: no Service names it any more", o.ip)
			}
			*rv = l.ResourceVersion
			if done, err := moveOutcome(l, o.ip, from, o.node); done || err != nil {
				return done, err
			}
		}
	}
}

func (o *MoveOptions) interrupted(name string) error {
	return fmt.Errorf("interrupted; the request to move %s to %s stays on lease %s/%s", o.ip, o.node, o.namespace, name)
}

// withdraw takes back the request after cause (a timeout, a failed watch)
// ended the wait, unless the move just succeeded: nil means the target
// holds the IP after all. Each write is on the version just read, and only
// when the lock still asks for o.node, so a request someone wrote meanwhile
// stays.
func (o *MoveOptions) withdraw(ctx context.Context, leases coordinationv1client.LeaseInterface, name, from string, cause error) error {
	for attempt := 1; ; attempt++ {
		l, err := o.reread(ctx, leases, name)
		if err != nil {
			return fmt.Errorf("%w; %w", cause, err)
		}
		if done, err := moveOutcome(l, o.ip, from, o.node); done || err != nil {
			if err != nil {
				return fmt.Errorf("%w; %w", cause, err)
			}
			return nil
		}
		_, err = leases.Update(ctx, lease.WithMoveTo(l, ""), metav1.UpdateOptions{})
		switch {
		case err == nil:
			return fmt.Errorf("%w; the move request was withdrawn", cause)
		case !apierrors.IsConflict(err) || attempt == moveAttempts:
			return fmt.Errorf("%w; withdrawing the move request failed, remove annotation %s from lease %s/%s: %w",
				cause, lease.AnnotationMoveTo, o.namespace, name, err)
		}
	}
}

// moveOutcome judges a lock after a move of ip from holder from to target
// was requested: done when target holds it, an error when the request was
// refused or overtaken, neither while it is pending.
func moveOutcome(l *coordinationv1.Lease, ip netip.Addr, from, target string) (bool, error) {
	holder, moveTo := holderOf(l), l.Annotations[lease.AnnotationMoveTo]
	switch {
	case holder == target:
		return true, nil
	case moveTo == target:
		return false, nil
	case moveTo != "":
		return false, fmt.Errorf("a move of %s to %s was requested meanwhile", ip, moveTo)
	case holder == from:
		return false, fmt.Errorf("%s refused to hand %s to %s: it does not see %s as a live eligible node", orNone(from), ip, target, target)
	}
	return false, fmt.Errorf("%s went to %s instead of %s", ip, orNone(holder), target)
}

func holderOf(l *coordinationv1.Lease) string {
	if h := l.Spec.HolderIdentity; h != nil {
		return *h
	}
	return ""
}
