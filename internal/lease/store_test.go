package lease_test

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/eip-project/eip/internal/kubeclient/clientset"
	"github.com/eip-project/eip/internal/lease"
)

var leasesResource = schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}

func newStore(t *testing.T) (*lease.Store, *fake.Clientset) {
	t.Helper()
	cs := fake.NewClientset()
	enforceVersions(cs)
	return lease.NewStore(clientset.Adapt(cs), ns, nil), cs
}

// The Store tells of every write it sends, a failed one too, by the
// Lease's role: what eip_lease_writes_total counts.
func TestStoreTellsEachWrite(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset()
	enforceVersions(cs)
	var got []string
	s := lease.NewStore(clientset.Adapt(cs), ns, func(role, op string) { got = append(got, role+" "+op) })

	lk, err := s.Create(ctx, lease.NewLockLease(ns, netip.MustParseAddr("198.18.0.8"), "node-1", "", nil, at(0)))
	assert.NilError(t, err)
	hb, err := s.Create(ctx, lease.RenewedHeartbeat(nil, ns, "node-1", 2*time.Second, lease.HeartbeatStatus{}, at(0)))
	assert.NilError(t, err)
	_, err = s.Update(ctx, hb)
	assert.NilError(t, err)
	_, err = s.Update(ctx, hb) // its version is stale now: a Conflict, counted all the same
	assert.Assert(t, apierrors.IsConflict(err), "%v", err)
	assert.NilError(t, s.Delete(ctx, lk.Name, lk.ResourceVersion))
	assert.NilError(t, s.Delete(ctx, lease.HeartbeatName("node-1"), "3"))
	assert.DeepEqual(t, got, []string{"lock create", "heartbeat create", "heartbeat update", "heartbeat update", "lock delete", "heartbeat delete"})
}

// enforceVersions makes the fake clientset behave like the API server for
// resourceVersions, which its tracker neither sets nor checks: every write
// gets a new version, and an Update or Delete whose version is not the
// stored one fails with a Conflict. Reactors see a copy of each action, so
// stamping its object does not touch the caller's.
func enforceVersions(cs *fake.Clientset) {
	var last int
	next := func() string { last++; return strconv.Itoa(last) }
	gvr := coordinationv1.SchemeGroupVersion.WithResource("leases")
	current := func(a k8stesting.Action, name string) (string, bool) {
		obj, err := cs.Tracker().Get(gvr, a.GetNamespace(), name)
		if err != nil {
			return "", false
		}
		return obj.(*coordinationv1.Lease).ResourceVersion, true
	}
	cs.PrependReactor("create", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		a.(k8stesting.CreateAction).GetObject().(*coordinationv1.Lease).ResourceVersion = next()
		return false, nil, nil
	})
	cs.PrependReactor("update", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		l := a.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease)
		if rv, ok := current(a, l.Name); ok && rv != l.ResourceVersion {
			return true, nil, apierrors.NewConflict(leasesResource, l.Name, fmt.Errorf("version %s is not %s", l.ResourceVersion, rv))
		}
		l.ResourceVersion = next()
		return false, nil, nil
	})
	cs.PrependReactor("delete", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		d := a.(k8stesting.DeleteAction)
		if p := d.GetDeleteOptions().Preconditions; p != nil && p.ResourceVersion != nil {
			if rv, ok := current(a, d.GetName()); ok && rv != *p.ResourceVersion {
				return true, nil, apierrors.NewConflict(leasesResource, d.GetName(), fmt.Errorf("version %s is not %s", *p.ResourceVersion, rv))
			}
		}
		return false, nil, nil
	})
}

// Two nodes read the same free lock and race to take it: exactly one wins,
// the other gets a Conflict it can recognise.
func TestStoreRace(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	ip := netip.MustParseAddr("198.18.0.8")
	_, err := s.Create(ctx, lease.NewLockLease(ns, ip, "", "", nil, at(0)))
	assert.NilError(t, err)
	seenByA, err := s.Get(ctx, lease.NameFor(ip))
	assert.NilError(t, err)
	seenByB := seenByA.DeepCopy()

	_, err = s.Update(ctx, lease.WithHolder(seenByA, ip, "node-a", "", nil, at(ms)))
	assert.NilError(t, err)
	_, err = s.Update(ctx, lease.WithHolder(seenByB, ip, "node-b", "", nil, at(ms)))
	assert.Assert(t, apierrors.IsConflict(err), "%v", err)

	got, err := s.Get(ctx, lease.NameFor(ip))
	assert.NilError(t, err)
	assert.Equal(t, *got.Spec.HolderIdentity, "node-a")

	// A delete on the stale version fails too; on the current one it works.
	err = s.Delete(ctx, got.Name, seenByB.ResourceVersion)
	assert.Assert(t, apierrors.IsConflict(err), "%v", err)
	assert.NilError(t, s.Delete(ctx, got.Name, got.ResourceVersion))
}

func TestStoreCreateGetUpdateDelete(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	ip := netip.MustParseAddr("198.18.0.7")

	created, err := s.Create(ctx, lease.NewLockLease(ns, ip, "node-a", "", []string{"default/web"}, at(0)))
	assert.NilError(t, err)
	assert.Equal(t, created.Name, "eip-198-18-0-7")
	assert.Assert(t, created.ResourceVersion != "")

	got, err := s.Get(ctx, "eip-198-18-0-7")
	assert.NilError(t, err)
	lk, err := lease.ParseLock(got)
	assert.NilError(t, err)
	assert.Equal(t, lk.Holder, "node-a")
	assert.Equal(t, got.Annotations[lease.AnnotationServices], "default/web")

	updated, err := s.Update(ctx, lease.WithHolder(got, ip, "node-b", "", nil, at(ms)))
	assert.NilError(t, err)
	assert.Assert(t, lease.Newer(updated.ResourceVersion, got.ResourceVersion))
	got, err = s.Get(ctx, "eip-198-18-0-7")
	assert.NilError(t, err)
	lk, err = lease.ParseLock(got)
	assert.NilError(t, err)
	assert.Equal(t, lk.Holder, "node-b")
	assert.Equal(t, lk.Moves, int32(1))

	assert.NilError(t, s.Delete(ctx, got.Name, got.ResourceVersion))
	_, err = s.Get(ctx, got.Name)
	assert.Assert(t, apierrors.IsNotFound(err), "%v", err)
	assert.ErrorContains(t, err, "get lease eip-198-18-0-7: ")
}

func TestStoreCreateAlreadyExists(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	ip := netip.MustParseAddr("2001:db8::5")
	_, err := s.Create(ctx, lease.NewLockLease(ns, ip, "node-a", "", nil, at(0)))
	assert.NilError(t, err)

	_, err = s.Create(ctx, lease.NewLockLease(ns, ip, "node-b", "", nil, at(0)))
	assert.Assert(t, apierrors.IsAlreadyExists(err), "%v", err)
	assert.ErrorContains(t, err, "create lease eip-2001-db8--5: ")
}

// The fake tracker does not enforce resourceVersion preconditions; the
// reactor plays the API server that saw another node write first.
func TestStoreUpdateConflict(t *testing.T) {
	ctx := context.Background()
	s, cs := newStore(t)
	ip := netip.MustParseAddr("198.18.0.9")
	created, err := s.Create(ctx, lease.NewLockLease(ns, ip, "", "", nil, at(0)))
	assert.NilError(t, err)

	var sentRV string
	cs.PrependReactor("update", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sentRV = a.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease).ResourceVersion
		return true, nil, apierrors.NewConflict(leasesResource, created.Name, nil)
	})
	_, err = s.Update(ctx, lease.WithHolder(created, ip, "node-a", "", nil, at(ms)))
	assert.Assert(t, apierrors.IsConflict(err), "%v", err)
	assert.ErrorContains(t, err, "update lease eip-198-18-0-9: ")
	assert.Equal(t, sentRV, created.ResourceVersion, "the update carries the version it was read at")
}

func TestStoreCreateRaceInjected(t *testing.T) {
	s, cs := newStore(t)
	cs.PrependReactor("create", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewAlreadyExists(leasesResource, "eip-198-18-0-1")
	})
	_, err := s.Create(context.Background(), lease.NewLockLease(ns, netip.MustParseAddr("198.18.0.1"), "node-a", "", nil, at(0)))
	assert.Assert(t, apierrors.IsAlreadyExists(err), "%v", err)
}

func TestStoreUpdateWithoutResourceVersionIsRefused(t *testing.T) {
	s, cs := newStore(t)
	l := lease.NewLockLease(ns, netip.MustParseAddr("198.18.0.2"), "node-a", "", nil, at(0))
	_, err := s.Update(context.Background(), l)
	assert.Error(t, err, "update lease eip-198-18-0-2: no resourceVersion to use as precondition")
	assert.Equal(t, len(cs.Actions()), 0, "nothing was sent")
}

func TestStoreDeleteSendsPrecondition(t *testing.T) {
	ctx := context.Background()
	s, cs := newStore(t)
	created, err := s.Create(ctx, lease.NewLockLease(ns, netip.MustParseAddr("198.18.0.3"), "node-a", "", nil, at(0)))
	assert.NilError(t, err)

	var opts metav1.DeleteOptions
	cs.PrependReactor("delete", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		opts = a.(k8stesting.DeleteAction).GetDeleteOptions()
		return false, nil, nil // let the tracker delete it
	})
	assert.NilError(t, s.Delete(ctx, created.Name, created.ResourceVersion))
	assert.Assert(t, opts.Preconditions != nil && opts.Preconditions.ResourceVersion != nil)
	assert.Equal(t, *opts.Preconditions.ResourceVersion, created.ResourceVersion)
	_, err = s.Get(ctx, created.Name)
	assert.Assert(t, apierrors.IsNotFound(err), "%v", err)
}

func TestStoreDeleteConflict(t *testing.T) {
	s, cs := newStore(t)
	cs.PrependReactor("delete", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(leasesResource, "eip-198-18-0-4", nil)
	})
	err := s.Delete(context.Background(), "eip-198-18-0-4", "3")
	assert.Assert(t, apierrors.IsConflict(err), "%v", err)
	assert.ErrorContains(t, err, "delete lease eip-198-18-0-4: ")
}

func TestStoreWritesItsNamespace(t *testing.T) {
	ctx := context.Background()
	s, cs := newStore(t)
	_, err := s.Create(ctx, lease.NewLockLease(ns, netip.MustParseAddr("198.18.0.5"), "node-a", "", nil, at(0)))
	assert.NilError(t, err)
	list, err := cs.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{})
	assert.NilError(t, err)
	assert.Equal(t, len(list.Items), 1)
	other, err := cs.CoordinationV1().Leases("default").List(ctx, metav1.ListOptions{})
	assert.NilError(t, err)
	assert.Equal(t, len(other.Items), 0)
}

// What the API server returns of a write or a read comes back without its
// managedFields, which the store's callers keep until their cache shows
// the Lease; the API server's own are left alone. (The fake clientset
// manages fields as the API server does.)
func TestStoreDropsManagedFields(t *testing.T) {
	ctx := context.Background()
	s, cs := newStore(t)
	ip := netip.MustParseAddr("198.18.0.6")
	created, err := s.Create(ctx, lease.NewLockLease(ns, ip, "node-a", "", nil, at(0)))
	assert.NilError(t, err)
	assert.Check(t, created.ManagedFields == nil)
	updated, err := s.Update(ctx, lease.WithHolder(created, ip, "node-b", "", nil, at(1)))
	assert.NilError(t, err)
	assert.Check(t, updated.ManagedFields == nil)
	read, err := s.Get(ctx, created.Name)
	assert.NilError(t, err)
	assert.Check(t, read.ManagedFields == nil)
	stored, err := cs.CoordinationV1().Leases(ns).Get(ctx, created.Name, metav1.GetOptions{})
	assert.NilError(t, err)
	assert.Check(t, len(stored.ManagedFields) > 0)
}
