package cli

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	"gotest.tools/v3/poll"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"

	"github.com/eip-project/eip/internal/lease"
)

func TestMoveArguments(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"move"}, "move takes an IP and a node, got 0 argument(s): kubectl eip move <ip> <node>"},
		{[]string{"move", "198.18.100.1"}, "move takes an IP and a node, got 1 argument(s): kubectl eip move <ip> <node>"},
		{[]string{"move", "198.18.100.1", "node-2", "node-3"}, "move takes an IP and a node, got 3 argument(s): kubectl eip move <ip> <node>"},
		{[]string{"move", "198.18.100.x", "node-2"}, `"198.18.100.x" is not an IP address`},
		{[]string{"move", "node-2", "198.18.100.1"}, `"node-2" is not an IP address`},
		{[]string{"move", "198.18.100.1", ""}, "the node name is empty"},
		{[]string{"move", "198.18.100.1", "node-2", "--timeout", "0s"}, "--timeout must be positive, not 0s"},
		{[]string{"move", "198.18.100.1", "node-2", "--timeout", "soon"}, `invalid argument "soon" for "--timeout" flag: time: invalid duration "soon"`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			h := newHarness(t, fixture()...)
			_, err := h.run(context.Background(), tc.args...)
			assert.Error(t, err, tc.want)
			assert.Equal(t, len(h.client.Actions()), 0, "no request before the arguments are valid")
		})
	}
}

// Every refusal happens before anything is written.
func TestMoveRefused(t *testing.T) {
	for _, tc := range []struct {
		ip, node string
		want     string
	}{
		{"198.18.100.77", "node-2", "198.18.100.77 is not managed by eip: no Service names it and it has no lock"},
		{"198.18.200.1", "node-2", "198.18.200.1 is not managed by eip: default/outside names it, but outside every configured range"},
		{"198.18.0.11", "node-2", `198.18.0.11 is not managed by eip: default/node-ip names it, but the address of node "node-1"`},
		{"198.18.100.9", "node-1", "198.18.100.9 is not managed by eip: no Service names it any more, and its lock is being deleted"},
		{"198.18.100.4", "node-2", "198.18.100.4 has no lock yet: no node has taken it; try again in a moment"},
		{"198.18.100.1", "node-9", `node "node-9" not found`},
		{"198.18.100.1", "node-6", "node-6 does not run eip: no heartbeat eip-node-node-6 in namespace eip-system"},
		{"198.18.100.1", "node-4", "node-4 is not alive: its heartbeat was last renewed 95s ago (lease duration 2s)"},
		{"198.18.100.1", "node-3", "node-3 is not eligible: Node is cordoned"},
		{"198.18.100.1", "node-5", "node-5 is not eligible: its daemon cannot serve IPs: interface eth1: link not found"},
		{"198.18.100.1", "node-7", "node-7 is not eligible: Node is labelled node.kubernetes.io/exclude-from-external-load-balancers"},
		{"198.18.100.1", "node-1", "198.18.100.1 is already on node-1"},
		{"::ffff:198.18.100.1", "node-1", "198.18.100.1 is already on node-1"},
	} {
		t.Run(tc.ip+" "+tc.node, func(t *testing.T) {
			h := newHarness(t, fixture()...)
			_, err := h.run(context.Background(), "move", tc.ip, tc.node)
			assert.Error(t, err, tc.want)
			for _, a := range h.client.Actions() {
				assert.Equal(t, a.GetVerb() == "update", false, "wrote %v", a)
			}
		})
	}
}

func TestMoveHandsOff(t *testing.T) {
	h := newHarness(t, fixture()...)
	ctx := context.Background()
	h.daemon(ctx, "198.18.100.1", func(l *coordinationv1.Lease) *coordinationv1.Lease {
		return lease.WithHolder(l, mustAddr("198.18.100.1"), l.Annotations[lease.AnnotationMoveTo], "", []string{"default/web"}, h.clock.Now())
	})
	out, err := h.run(ctx, "move", "198.18.100.1", "node-2")
	assert.NilError(t, err)
	assert.Equal(t, out, "moved 198.18.100.1 from node-1 to node-2 in 45ms\n")

	// The request went to the right lock, on the version the plugin read.
	first := h.updates()[0]
	assert.Equal(t, first.Name, "eip-198-18-100-1")
	assert.Equal(t, first.ResourceVersion, "20")
	assert.Equal(t, first.Annotations[lease.AnnotationMoveTo], "node-2")
	assert.Equal(t, *first.Spec.HolderIdentity, "node-1", "the plugin never writes the holder")
	l := h.lease("eip-198-18-100-1")
	assert.Equal(t, *l.Spec.HolderIdentity, "node-2")
	assert.Equal(t, l.Annotations[lease.AnnotationMoveTo], "")
}

// A dead holder cannot hand off; the target takes the IP itself.
func TestMoveFromDeadHolder(t *testing.T) {
	h := newHarness(t, fixture()...)
	ctx := context.Background()
	h.daemon(ctx, "198.18.100.3", func(l *coordinationv1.Lease) *coordinationv1.Lease {
		return lease.WithHolder(l, mustAddr("198.18.100.3"), "node-2", "", []string{"shop/front"}, h.clock.Now())
	})
	out, err := h.run(ctx, "move", "198.18.100.3", "node-2")
	assert.NilError(t, err)
	assert.Equal(t, out, "moved 198.18.100.3 from node-4 to node-2 in 45ms\n")
}

func TestMoveRefusedByHolder(t *testing.T) {
	h := newHarness(t, fixture()...)
	ctx := context.Background()
	h.daemon(ctx, "198.18.100.1", func(l *coordinationv1.Lease) *coordinationv1.Lease {
		return lease.WithMoveTo(l, "")
	})
	_, err := h.run(ctx, "move", "198.18.100.1", "node-2")
	assert.Error(t, err, "node-1 refused to hand 198.18.100.1 to node-2: it does not see node-2 as a live eligible node")
}

func TestMoveTakenByAnother(t *testing.T) {
	h := newHarness(t, fixture()...)
	ctx := context.Background()
	h.daemon(ctx, "198.18.100.3", func(l *coordinationv1.Lease) *coordinationv1.Lease {
		return lease.WithHolder(l, mustAddr("198.18.100.3"), "node-1", "", []string{"shop/front"}, h.clock.Now())
	})
	_, err := h.run(ctx, "move", "198.18.100.3", "node-2")
	assert.Error(t, err, "198.18.100.3 went to node-1 instead of node-2")
}

// On timeout the request is withdrawn, so that it cannot take effect later.
func TestMoveTimeout(t *testing.T) {
	h := newHarness(t, fixture()...)
	ctx := context.Background()
	done := make(chan error, 1)
	go func() {
		_, err := h.run(ctx, "move", "198.18.100.1", "node-2", "--timeout", "3s")
		done <- err
	}()
	poll.WaitOn(t, func(poll.LogT) poll.Result {
		if h.clock.HasWaiters() {
			return poll.Success()
		}
		return poll.Continue("move has not started waiting")
	}, poll.WithTimeout(10*time.Second), poll.WithDelay(time.Millisecond))
	assert.Equal(t, h.lease("eip-198-18-100-1").Annotations[lease.AnnotationMoveTo], "node-2")
	h.clock.Step(3 * time.Second)
	assert.Error(t, <-done, "timed out after 3s: 198.18.100.1 is still on node-1, not node-2; the move request was withdrawn")
	l := h.lease("eip-198-18-100-1")
	assert.Equal(t, *l.Spec.HolderIdentity, "node-1")
	_, pending := l.Annotations[lease.AnnotationMoveTo]
	assert.Assert(t, !pending)
}

func TestMoveNoWait(t *testing.T) {
	h := newHarness(t, fixture()...)
	out, err := h.run(context.Background(), "move", "2001:db8::100:1", "node-2", "--wait=false")
	assert.NilError(t, err)
	assert.Equal(t, out, "requested move of 2001:db8::100:1 from node-1 to node-2\n")
	assert.Equal(t, h.lease("eip-2001-db8--100-1").Annotations[lease.AnnotationMoveTo], "node-2")
}

// Someone writes the lock between the plugin's read and its request: the
// plugin reads it again and asks on the new version.
func TestMoveRetriesAfterConflict(t *testing.T) {
	h := newHarness(t, fixture()...)
	ctx := context.Background()
	interfered := false
	h.client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if !interfered {
			// Through the tracker: a reactor runs under the fake's lock.
			interfered = true
			gvr := coordinationv1.SchemeGroupVersion.WithResource("leases")
			obj, err := h.client.Tracker().Get(gvr, ns, "eip-198-18-100-1")
			assert.NilError(t, err)
			l := obj.(*coordinationv1.Lease).DeepCopy()
			l.Annotations[lease.AnnotationServices] = "default/web,default/web2"
			l.ResourceVersion = "500"
			assert.NilError(t, h.client.Tracker().Update(gvr, l, ns))
		}
		return false, nil, nil
	})
	h.daemon(ctx, "198.18.100.1", func(l *coordinationv1.Lease) *coordinationv1.Lease {
		return lease.WithHolder(l, mustAddr("198.18.100.1"), "node-2", "", []string{"default/web"}, h.clock.Now())
	})
	out, err := h.run(ctx, "move", "198.18.100.1", "node-2")
	assert.NilError(t, err)
	assert.Equal(t, out, "moved 198.18.100.1 from node-1 to node-2 in 45ms\n")
	ups := h.updates()
	assert.Equal(t, ups[0].ResourceVersion, "20")
	assert.Equal(t, ups[1].ResourceVersion, "500")
	assert.Equal(t, ups[1].Annotations[lease.AnnotationServices], "default/web,default/web2", "the retry keeps what the other writer wrote")
}

func TestMoveOutcome(t *testing.T) {
	ip := netip.MustParseAddr("198.18.100.1")
	l := func(holder, moveTo string) *coordinationv1.Lease {
		return withMoveTo(lock("198.18.100.1", holder, 0, now), moveTo)
	}
	for _, tc := range []struct {
		name     string
		lock     *coordinationv1.Lease
		from     string
		wantDone bool
		wantErr  string
	}{
		{"pending", l("node-1", "node-2"), "node-1", false, ""},
		{"handed off", l("node-2", ""), "node-1", true, ""},
		{"taken from a dead holder", l("node-2", ""), "node-4", true, ""},
		{"refused", l("node-1", ""), "node-1", false, "node-1 refused to hand 198.18.100.1 to node-2: it does not see node-2 as a live eligible node"},
		{"overtaken", l("node-1", "node-3"), "node-1", false, "a move of 198.18.100.1 to node-3 was requested meanwhile"},
		{"went elsewhere", l("node-3", ""), "node-1", false, "198.18.100.1 went to node-3 instead of node-2"},
		{"released", l("", ""), "node-1", false, "198.18.100.1 went to <none> instead of node-2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			done, err := moveOutcome(tc.lock, ip, tc.from, "node-2")
			assert.Equal(t, done, tc.wantDone)
			if tc.wantErr == "" {
				assert.NilError(t, err)
			} else {
				assert.Error(t, err, tc.wantErr)
			}
		})
	}
}

// daemon plays the eipd that acts on a move request of ip: once the lock
// asks for a move, 45ms pass and act's answer is written.
func (h *harness) daemon(ctx context.Context, ip string, act func(*coordinationv1.Lease) *coordinationv1.Lease) {
	h.t.Helper()
	leases := h.client.CoordinationV1().Leases(ns)
	w, err := leases.Watch(ctx, metav1.ListOptions{})
	assert.NilError(h.t, err)
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			l, ok := ev.Object.(*coordinationv1.Lease)
			if !ok || l.Name != lease.NameFor(mustAddr(ip)) || l.Annotations[lease.AnnotationMoveTo] == "" {
				continue
			}
			h.clock.Step(45 * time.Millisecond)
			if _, err := leases.Update(ctx, act(l), metav1.UpdateOptions{}); err != nil {
				h.t.Errorf("daemon: %v", err)
			}
			return
		}
	}()
}

// updates are the Leases the commands sent in update requests, in order.
func (h *harness) updates() []*coordinationv1.Lease {
	var out []*coordinationv1.Lease
	for _, a := range h.client.Actions() {
		if u, ok := a.(k8stesting.UpdateAction); ok && a.GetResource().Resource == "leases" {
			out = append(out, u.GetObject().(*coordinationv1.Lease))
		}
	}
	return out
}

func (h *harness) lease(name string) *coordinationv1.Lease {
	h.t.Helper()
	l, err := h.client.CoordinationV1().Leases(ns).Get(context.Background(), name, metav1.GetOptions{})
	assert.NilError(h.t, err)
	return l
}

// A watch that fails leaves nobody to see the move through: the request is
// withdrawn, so that it cannot take effect later.
func TestMoveWithdrawsWhenWatchFails(t *testing.T) {
	h := newHarness(t, fixture()...)
	h.client.PrependWatchReactor("leases", func(k8stesting.Action) (bool, watch.Interface, error) {
		return true, nil, apierrors.NewForbidden(coordinationv1.Resource("leases"), "", errors.New(`user "op" cannot watch`))
	})
	_, err := h.run(context.Background(), "move", "198.18.100.1", "node-2")
	assert.Error(t, err, `watch lease eip-system/eip-198-18-100-1: leases.coordination.k8s.io is forbidden: user "op" cannot watch; the move request was withdrawn`)
	l := h.lease("eip-198-18-100-1")
	assert.Equal(t, *l.Spec.HolderIdentity, "node-1")
	_, pending := l.Annotations[lease.AnnotationMoveTo]
	assert.Assert(t, !pending)
	ups := h.updates()
	assert.Equal(t, len(ups), 2)
	assert.Equal(t, ups[1].ResourceVersion, "1001", "withdrawn on the version the request wrote, not blindly")
}

// A request written by someone else after this one is theirs: it stays.
func TestMoveWatchFailsKeepsNewerRequest(t *testing.T) {
	h := newHarness(t, fixture()...)
	leases := h.client.CoordinationV1().Leases(ns)
	h.client.PrependWatchReactor("leases", func(k8stesting.Action) (bool, watch.Interface, error) {
		gvr := coordinationv1.SchemeGroupVersion.WithResource("leases")
		obj, err := h.client.Tracker().Get(gvr, ns, "eip-198-18-100-1")
		assert.NilError(t, err)
		l := withMoveTo(obj.(*coordinationv1.Lease), "node-3")
		l.ResourceVersion = "900"
		assert.NilError(t, h.client.Tracker().Update(gvr, l, ns))
		return true, nil, errors.New("connection refused")
	})
	_, err := h.run(context.Background(), "move", "198.18.100.1", "node-2")
	assert.Error(t, err, "watch lease eip-system/eip-198-18-100-1: connection refused; a move of 198.18.100.1 to node-3 was requested meanwhile")
	l, err := leases.Get(context.Background(), "eip-198-18-100-1", metav1.GetOptions{})
	assert.NilError(t, err)
	assert.Equal(t, l.Annotations[lease.AnnotationMoveTo], "node-3")
	assert.Equal(t, len(h.updates()), 1, "only the request was written")
}
