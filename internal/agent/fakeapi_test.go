package agent

// The fake API server for Leases (LeaseWriter) of the loop's test world.

import (
	"context"
	"errors"
	"fmt"
	"slices"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/eip-project/eip/internal/lease"
)

var leaseResource = schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}

// get is the Lease named name as the API server holds it, nil if none.
func (w *world) get(name string) *coordinationv1.Lease {
	obj, ok, _ := w.leases.GetByKey(testNS + "/" + name)
	if !ok {
		return nil
	}
	if k, ok := obj.(*lease.Kept); ok {
		return k.Lease()
	}
	return obj.(*coordinationv1.Lease)
}

// leaseChanged is the informer's event for l: the agent sees l as its
// cache keeps it (keepWhatIsRead).
func (w *world) leaseChanged(l *coordinationv1.Lease) { w.a.leaseChanged(kept(l)) }

// leaseWritten is leaseChanged for l updated from prev (nil if created).
func (w *world) leaseWritten(prev, l *coordinationv1.Lease) {
	var old any
	if prev != nil {
		old = kept(prev)
	}
	w.a.leaseWritten(old, kept(l))
}

// kept is l as a cache keeps it.
func kept(l *coordinationv1.Lease) any {
	k, _ := newInterner().keepWhatIsRead(l.DeepCopy())
	return k
}

func (w *world) log(verb string, l *coordinationv1.Lease) {
	if l.Labels[lease.RoleLabel] == lease.RoleHeartbeat {
		// Renewals come every tick: kept apart from the other calls.
		r := fmt.Sprintf("%s eligible=%s duration=%ds", verb, l.Annotations[lease.AnnotationEligible], *l.Spec.LeaseDurationSeconds)
		w.renewals = append(w.renewals, fmt.Sprintf("%s %s", w.clk.Now().Sub(t0), r))
		w.record("heartbeat " + r)
		return
	}
	h := ""
	if l.Spec.HolderIdentity != nil {
		h = *l.Spec.HolderIdentity
	}
	line := fmt.Sprintf("%s %s holder=%s", verb, l.Name, h)
	if n := l.Annotations[lease.AnnotationSuccessor]; n != "" {
		line += " successor=" + n
	}
	w.call(line)
}

// call logs an API write or an address change, in the calls a test takes
// and in the trace.
func (w *world) call(what string) {
	w.calls = append(w.calls, what)
	w.record(what)
}

// errAPIDown is what every Lease request returns while apiDown is set.
var errAPIDown = errors.New("connect: connection refused")

// timedOut reports whether a write of l fails for lockTimeouts, and logs it.
func (w *world) timedOut(verb string, l *coordinationv1.Lease) bool {
	if w.lockTimeouts == 0 || l.Labels[lease.RoleLabel] == lease.RoleHeartbeat {
		return false
	}
	w.lockTimeouts--
	w.call(fmt.Sprintf("%s %s timed out", verb, l.Name))
	return true
}

// unanswered is the error a write of l gets while the API server is down
// (apiDown) or its write times out (lockTimeouts), nil otherwise.
func (w *world) unanswered(verb string, l *coordinationv1.Lease) error {
	if w.apiDown {
		w.record(verb + " " + l.Name + " refused: API down")
		return errAPIDown
	}
	if w.timedOut(verb, l) {
		return context.DeadlineExceeded
	}
	return nil
}

func (w *world) Create(_ context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	if err := w.unanswered("create", l); err != nil {
		return nil, err
	}
	if w.get(l.Name) != nil || slices.ContainsFunc(w.lagged, func(x *coordinationv1.Lease) bool { return x.Name == l.Name }) {
		return nil, apierrors.NewAlreadyExists(leaseResource, l.Name)
	}
	out := l.DeepCopy()
	out.ResourceVersion = w.nextRV()
	if w.lockLag && l.Labels[lease.RoleLabel] == lease.RoleLock {
		w.lagged = append(w.lagged, out)
		w.log("create", out)
		return out.DeepCopy(), nil
	}
	w.must(w.leases.Add(out))
	w.leaseChanged(out)
	w.log("create", out)
	return out.DeepCopy(), nil
}

// deliverLocks has the watch deliver the lock creates it held back.
func (w *world) deliverLocks() {
	for _, l := range w.lagged {
		w.must(w.leases.Add(l))
		w.leaseChanged(l)
	}
	w.lagged = nil
}

func (w *world) Update(_ context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	if err := w.unanswered("update", l); err != nil {
		return nil, err
	}
	cur := w.get(l.Name)
	if cur == nil {
		return nil, apierrors.NewNotFound(leaseResource, l.Name)
	}
	if cur.ResourceVersion != l.ResourceVersion {
		return nil, apierrors.NewConflict(leaseResource, l.Name, fmt.Errorf("version %s is not %s", l.ResourceVersion, cur.ResourceVersion))
	}
	out := l.DeepCopy()
	out.ResourceVersion = w.nextRV()
	w.must(w.leases.Update(out))
	if l.Labels[lease.RoleLabel] == lease.RoleHeartbeat {
		w.s.sched.hbDirty = w.s.sched.hbDirty || !w.watchLag
	} else {
		w.leaseChanged(out)
	}
	w.log("update", out)
	return out.DeepCopy(), nil
}

func (w *world) Delete(_ context.Context, name, rv string) error {
	if w.apiDown {
		w.record("delete " + name + " refused: API down")
		return errAPIDown
	}
	cur := w.get(name)
	if cur == nil {
		return apierrors.NewNotFound(leaseResource, name)
	}
	if rv != "" && cur.ResourceVersion != rv {
		return apierrors.NewConflict(leaseResource, name, fmt.Errorf("version %s is not %s", rv, cur.ResourceVersion))
	}
	w.must(w.leases.Delete(cur))
	w.leaseChanged(cur)
	w.log("delete", cur)
	return nil
}

func (w *world) Get(_ context.Context, name string) (*coordinationv1.Lease, error) {
	w.record("get " + name)
	if w.apiDown {
		return nil, errAPIDown
	}
	if l := w.get(name); l != nil {
		return l.DeepCopy(), nil
	}
	return nil, apierrors.NewNotFound(leaseResource, name)
}
