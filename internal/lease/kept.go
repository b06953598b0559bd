package lease

import (
	"maps"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Kept is a lock Lease as eipd's cache keeps it: the Lock the loop reads,
// and what a write built from it must carry over, in one struct of a few
// words. A decoded Lease keeps its annotations in a map and its spec
// behind pointers: with the cache's bookkeeping ~900 bytes a lock, a third
// of a 10,000-IP eipd's heap, which the garbage collector marks in every
// cycle of a mass failover. A Kept is ~370 (BenchmarkCacheBytes).
//
// A Kept is never changed once made: caches share it.
type Kept struct {
	// Lock is what ParseLock reads of the Lease. For a damaged lock
	// (Err set) it holds the name, holder, move and resourceVersion, and
	// no IP.
	Lock
	Namespace string
	// Services and ReservedFor are the AnnotationServices and
	// AnnotationReservedFor of the Lease.
	Services, ReservedFor string
	// Err is what ParseLock says of a damaged lock, nil for a sound one.
	Err error
	// rest is what eip neither reads nor writes: labels and annotations
	// of others, finalizers, owner references, spec fields a lock does not
	// use, and a damaged lock's IP and successor text; nil almost always.
	// An update replaces the whole object, so a write must carry them
	// over.
	rest *keptRest
}

type keptRest struct {
	ipText, successorText  string   // a damaged lock's, as written
	empty                  []string // the keys of lockAnnotations present with an empty value
	labels, annotations    map[string]string
	finalizers             []string
	owners                 []metav1.OwnerReference
	duration               *int32
	renew                  *metav1.MicroTime
	strategy               *coordinationv1.CoordinatedLeaseStrategy
	preferred              *string
	noHolder, noTransition bool
}

// lockAnnotations are the annotations a Kept holds in its own fields.
var lockAnnotations = map[string]bool{AnnotationIP: true, AnnotationServices: true, AnnotationMoveTo: true, AnnotationSuccessor: true, AnnotationReservedFor: true,
	AnnotationOwner: true, AnnotationOwnerUID: true}

// Keep is the Kept of lock Lease l. share returns the copy of a string
// that many locks hold alike (a node's name, the namespace), for them to
// share; nil keeps every string as it is.
func Keep(l *coordinationv1.Lease, share func(string) string) *Kept {
	if share == nil {
		share = func(s string) string { return s }
	}
	lk, err := ParseLock(l)
	k := &Kept{Lock: lk, Namespace: share(l.Namespace), Services: l.Annotations[AnnotationServices], ReservedFor: l.Annotations[AnnotationReservedFor], Err: err}
	if err != nil {
		// The loop honours a damaged lock's holder and move, so that its
		// next owner writes it whole.
		k.Lock = honoured(l)
	}
	k.Holder, k.MoveTo, k.Successor = share(k.Holder), share(k.MoveTo), share(k.Successor)
	k.keepRest(l, err != nil)
	return k
}

func (k *Kept) keepRest(l *coordinationv1.Lease, damaged bool) {
	r := keptRest{
		finalizers: l.Finalizers, owners: l.OwnerReferences,
		duration: l.Spec.LeaseDurationSeconds, renew: l.Spec.RenewTime,
		strategy: l.Spec.Strategy, preferred: l.Spec.PreferredHolder,
		noHolder: l.Spec.HolderIdentity == nil, noTransition: l.Spec.LeaseTransitions == nil,
	}
	if damaged {
		r.ipText, r.successorText = l.Annotations[AnnotationIP], l.Annotations[AnnotationSuccessor]
	}
	for key, v := range l.Labels {
		if key == ManagedByLabel && v == ManagedBy || key == RoleLabel && v == RoleLock {
			continue
		}
		if r.labels == nil {
			r.labels = map[string]string{}
		}
		r.labels[key] = v
	}
	for key, v := range l.Annotations {
		if lockAnnotations[key] {
			if v == "" {
				r.empty = append(r.empty, key)
			}
			continue
		}
		if r.annotations == nil {
			r.annotations = map[string]string{}
		}
		r.annotations[key] = v
	}
	if r.ipText != "" || r.successorText != "" || r.empty != nil || r.labels != nil || r.annotations != nil || len(r.finalizers) > 0 || len(r.owners) > 0 ||
		r.duration != nil || r.renew != nil || r.strategy != nil || r.preferred != nil || r.noHolder || r.noTransition {
		// A copy, so that only a lock with a rest allocates one.
		kept := r
		k.rest = &kept
	}
}

// Lease is the lock Lease k was kept of, as a write starts from it: its
// resourceVersion is the precondition of an update. Its UID, creation time
// and managedFields are unset, which an update leaves as they are.
func (k *Kept) Lease() *coordinationv1.Lease {
	r := k.rest
	if r == nil {
		r = &keptRest{}
	}
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name: k.Name, Namespace: k.Namespace, ResourceVersion: k.ResourceVersion,
			Labels:     map[string]string{ManagedByLabel: ManagedBy, RoleLabel: RoleLock},
			Finalizers: r.finalizers, OwnerReferences: r.owners,
		},
		Spec: coordinationv1.LeaseSpec{
			LeaseDurationSeconds: r.duration, RenewTime: r.renew, Strategy: r.strategy, PreferredHolder: r.preferred,
		},
	}
	maps.Copy(l.Labels, r.labels)
	l.Annotations = maps.Clone(r.annotations)
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	for _, key := range r.empty {
		l.Annotations[key] = ""
	}
	ip, successor := r.ipText, r.successorText
	if k.Err == nil {
		ip, successor = k.IP.String(), k.Successor
	}
	for _, a := range [...]struct{ key, v string }{{AnnotationIP, ip}, {AnnotationServices, k.Services}, {AnnotationMoveTo, k.MoveTo}, {AnnotationSuccessor, successor}, {AnnotationReservedFor, k.ReservedFor},
		{AnnotationOwner, k.Owner}, {AnnotationOwnerUID, string(k.OwnerUID)}} {
		if a.v != "" {
			l.Annotations[a.key] = a.v
		}
	}
	if !r.noHolder {
		h := k.Holder
		l.Spec.HolderIdentity = &h
	}
	if !r.noTransition {
		m := k.Moves
		l.Spec.LeaseTransitions = &m
	}
	if !k.MovedAt.IsZero() {
		t := metav1.NewMicroTime(k.MovedAt)
		l.Spec.AcquireTime = &t
	}
	return l
}

// GetObjectMeta makes a Kept an object a cache can key (meta.Accessor):
// by namespace and name.
func (k *Kept) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Namespace: k.Namespace, Name: k.Name, ResourceVersion: k.ResourceVersion}
}
