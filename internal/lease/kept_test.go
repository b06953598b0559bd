package lease_test

import (
	"net/netip"
	"strings"
	"testing"
	"unsafe"

	"gotest.tools/v3/assert"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/eip-project/eip/internal/lease"
)

// A kept lock writes back as the Lease it was kept of, whatever others
// added to it, and reads as ParseLock reads that Lease.
func TestKeptWritesBackWhatItKept(t *testing.T) {
	ip := netip.MustParseAddr("198.18.0.7")
	plain := lease.NewLockLease(ns, ip, "node-a", "node-b", []string{"default/web"}, at(0))
	plain.ResourceVersion = "42"

	moved := lease.WithMoveTo(lease.WithHolder(plain, ip, "node-c", "", []string{"default/web", "shop/api"}, at(3)), "node-a")
	moved.Annotations[lease.AnnotationReservedFor] = "shop/api"
	owned := lease.WithOwner(plain, "default/web", "uid-1")

	theirs := plain.DeepCopy()
	theirs.Labels["team"] = "net"
	theirs.Annotations["example.com/note"] = "do not touch"
	theirs.Finalizers = []string{"example.com/keep"}
	theirs.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "eip-config", UID: "u-1"}}
	d, pref := int32(9), "node-z"
	theirs.Spec.LeaseDurationSeconds, theirs.Spec.PreferredHolder = &d, &pref

	free := plain.DeepCopy()
	free.Spec.HolderIdentity, free.Spec.LeaseTransitions, free.Spec.AcquireTime = nil, nil, nil

	for name, l := range map[string]*coordinationv1.Lease{"plain": plain, "moved": moved, "owned": owned, "theirs": theirs, "free": free} {
		t.Run(name, func(t *testing.T) {
			k := lease.Keep(l, nil)
			assert.DeepEqual(t, k.Lease(), l)
			lk, err := lease.ParseLock(l)
			assert.NilError(t, err)
			assert.NilError(t, k.Err)
			assert.Check(t, k.Lock == lk, "%+v", k.Lock)
		})
	}
}

// A damaged lock is kept with its error, its holder and move, and no IP
// or successor; it writes back with its annotations as they were.
func TestKeptDamagedLock(t *testing.T) {
	l := lease.NewLockLease(ns, netip.MustParseAddr("198.18.0.7"), "node-a", "node-c", nil, at(0))
	l.Annotations[lease.AnnotationIP] = "not-an-ip"
	l.Annotations[lease.AnnotationMoveTo] = "node-b"
	k := lease.Keep(l, nil)
	assert.ErrorContains(t, k.Err, "not an IP address")
	assert.Equal(t, k.Holder, "node-a")
	assert.Equal(t, k.MoveTo, "node-b")
	assert.Equal(t, k.Successor, "", "a damaged lock's successor is not honoured")
	assert.Check(t, !k.IP.IsValid())
	assert.DeepEqual(t, k.Lease(), l)
}

// Keep shares the strings share returns.
func TestKeepShares(t *testing.T) {
	shared := map[string]string{}
	share := func(s string) string {
		if c, ok := shared[s]; ok {
			return c
		}
		shared[s] = s
		return s
	}
	// Each decoded Lease has its own copies, as protobuf gives them.
	lock := func(ip string) *coordinationv1.Lease {
		return lease.NewLockLease(strings.Clone(ns), netip.MustParseAddr(ip), strings.Clone("node-a"), strings.Clone("node-b"), nil, at(0))
	}
	a, b := lease.Keep(lock("198.18.0.7"), share), lease.Keep(lock("198.18.0.8"), share)
	same := func(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }
	assert.Check(t, same(a.Holder, b.Holder) && same(a.Successor, b.Successor) && same(a.Namespace, b.Namespace))
}
