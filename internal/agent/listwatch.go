package agent

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/eip-project/eip/internal/endpoints"
	"github.com/eip-project/eip/internal/ipset"
	"github.com/eip-project/eip/internal/lease"
	"github.com/eip-project/eip/internal/listwatch"
)

// apiRetry is how often an informer tries the API server again while it is
// unreachable.
const apiRetry = 250 * time.Millisecond

// patient makes an informer's list and watch calls wait out an unreachable
// API server, trying again every apiRetry, instead of failing. A reflector
// backs off after each failed call, doubling up to 30 s, so after an outage
// of a few seconds its next try may come half a minute after the API server
// is back; until then this node sees no heartbeat, may write no lock and
// binds nothing (with api-loss=fence, nothing at all). Errors the API server
// itself returns (Forbidden, Gone, …) pass through to the reflector.
type patient struct {
	lw    cache.ListerWatcherWithContext
	every time.Duration
	clk   clock.Clock
}

var _ cache.ListerWatcherWithContext = patient{}

func (p patient) List(o metav1.ListOptions) (runtime.Object, error) {
	return p.ListWithContext(context.Background(), o)
}

func (p patient) Watch(o metav1.ListOptions) (watch.Interface, error) {
	return p.WatchWithContext(context.Background(), o)
}

func (p patient) ListWithContext(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
	return untilReached(ctx, p, func() (runtime.Object, error) { return p.lw.ListWithContext(ctx, o) })
}

func (p patient) WatchWithContext(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	return untilReached(ctx, p, func() (watch.Interface, error) { return p.lw.WatchWithContext(ctx, o) })
}

func untilReached[T any](ctx context.Context, p patient, call func() (T, error)) (T, error) {
	for {
		out, err := call()
		if err == nil || !unreachable(err) {
			return out, err
		}
		select {
		case <-ctx.Done():
			return out, err
		case <-p.clk.After(p.every):
		}
	}
}

// unreachable tells an API server that did not answer (connection refused
// or reset, timeout) from one that answered with an error status.
func unreachable(err error) bool {
	var st apierrors.APIStatus
	return !errors.As(err, &st)
}

// patientInformer is a patient informer of lw, whose objects are like
// obj, keeping only what the agent reads of them.
func (a *Agent) patientInformer(lw *cache.ListWatch, obj runtime.Object) cache.SharedIndexInformer {
	inf := cache.NewSharedIndexInformer(patient{lw: lw, every: apiRetry, clk: a.clk}, obj, 0, indexersFor(obj))
	// Set before the informer starts, so it cannot fail.
	_ = inf.SetTransform(newInterner().keepWhatIsRead)
	return inf
}

// heartbeatIndex indexes eip's heartbeat Leases under lease.RoleHeartbeat:
// a peer's renewal reads the heartbeats, a few dozen Leases among
// thousands of locks. Locks are not indexed: nothing looks them up by
// role, and an index of 10,000 keys is memory.
const heartbeatIndex = "heartbeat"

// indexersFor are the indexes of the cache of obj's kind. Services have
// none: eipd reads them by key or all at once, never by namespace. Nor do
// Leases have a namespace index: eipd watches those of one namespace, so
// listing them by namespace is listing them all, and the index would
// hold every lock's key once more.
func indexersFor(obj runtime.Object) cache.Indexers {
	switch obj.(type) {
	case *corev1.Service:
		return cache.Indexers{}
	case *coordinationv1.Lease:
		return cache.Indexers{
			heartbeatIndex: func(obj any) ([]string, error) {
				if isHeartbeat(obj) {
					return []string{lease.RoleHeartbeat}, nil
				}
				return nil, nil
			},
		}
	case *discoveryv1.EndpointSlice:
		// By Service alone: eipd reads the slices of one Service at a
		// time, the kubernetes Service's among them.
		return cache.Indexers{
			serviceIndex: func(obj any) ([]string, error) {
				es, ok := obj.(*discoveryv1.EndpointSlice)
				if !ok || es.Labels[discoveryv1.LabelServiceName] == "" {
					return nil, nil
				}
				return []string{es.Namespace + "/" + es.Labels[discoveryv1.LabelServiceName]}, nil
			},
		}
	}
	return cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
}

// serviceIndex indexes EndpointSlices by their Service, "namespace/name".
const serviceIndex = "service"

// interner makes the objects of one cache share what thousands of them
// hold alike: every lock names one of a few nodes and lives in one
// namespace, every Service has one of a few types and families, yet each
// decoded object has its own copies. Sharing is safe because nothing
// changes an object in a cache (every write starts from a copy). It keeps
// at most internMax values, so that objects someone else labels at random
// cannot grow it without bound.
type interner struct {
	mu     sync.Mutex
	strs   map[string]string
	ptrs   map[any]any // a value -> the shared pointer to it (sharedPtr)
	labels []map[string]string
}

// internMax bounds the strings and the label sets an interner keeps.
const internMax = 256

func newInterner() *interner {
	return &interner{strs: map[string]string{}, ptrs: map[any]any{}}
}

// str is the shared copy of v.
func (in *interner) str(v string) string {
	if s, ok := in.strs[v]; ok {
		return s
	}
	if len(in.strs) < internMax {
		in.strs[v] = v
	}
	return v
}

// sharedPtr is the shared pointer to the value p points to (nil for nil):
// a lock's holder, a Service's family policy.
func sharedPtr[T comparable](in *interner, p *T) *T {
	if p == nil {
		return nil
	}
	if q, ok := in.ptrs[*p]; ok {
		return q.(*T)
	}
	if len(in.ptrs) < internMax {
		in.ptrs[*p] = p
	}
	return p
}

// familiesKey keys a Service's IP families, joined, in ptrs.
type familiesKey string

// families is the shared slice equal to f.
func (in *interner) families(f []corev1.IPFamily) []corev1.IPFamily {
	if len(f) == 0 {
		return nil
	}
	var key strings.Builder
	for _, fam := range f {
		key.WriteString(string(fam))
		key.WriteByte(',')
	}
	if q, ok := in.ptrs[familiesKey(key.String())]; ok {
		return q.([]corev1.IPFamily)
	}
	if len(in.ptrs) < internMax {
		in.ptrs[familiesKey(key.String())] = f
	}
	return f
}

// labelSet is the shared map equal to m.
func (in *interner) labelSet(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	for _, l := range in.labels {
		if maps.Equal(l, m) {
			return l
		}
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[in.str(k)] = in.str(v)
	}
	if len(in.labels) < internMax {
		in.labels = append(in.labels, out)
	}
	return out
}

// keepWhatIsRead drops, before an object enters a cache, what eipd never
// reads: every object's managedFields (often larger than the rest of a
// Lease), of a Node everything in its status but its addresses (images
// and conditions are most of a real Node), of a Service all but what
// ipset.Service holds, and of a heartbeat Lease its UID (an
// update without one keeps the stored UID). A lock Lease is kept as a
// lease.Kept, the strings it shares with the others interned. eipd writes
// Leases from its cache, and patches only the load-balancer ingress of a
// Service's status, never Nodes; an update whose managedFields are unset
// leaves the API server's unchanged.
func (in *interner) keepWhatIsRead(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	switch o := obj.(type) {
	case *corev1.Node:
		o.Status = corev1.NodeStatus{Addresses: o.Status.Addresses}
	case *corev1.Service:
		in.mu.Lock()
		defer in.mu.Unlock()
		return in.keepService(o), nil
	case *discoveryv1.EndpointSlice:
		in.mu.Lock()
		defer in.mu.Unlock()
		in.keepOfSlice(o)
	case *coordinationv1.Lease:
		if o.Labels[lease.RoleLabel] == lease.RoleLock {
			in.mu.Lock()
			defer in.mu.Unlock()
			return lease.Keep(o, in.str), nil
		}
		o.UID = ""
	}
	return obj, nil
}

// keepService is what eipd reads of svc, sharing what most Services hold
// alike: their namespace, type, families and family policy, the
// protocols of their ports and the IP mode of their ingress. A cluster's
// Services carry labels, selectors, cluster IPs, kubectl's last applied
// configuration and status conditions that eipd never looks at: with
// thousands of Services they were most of its memory.
func (in *interner) keepService(svc *corev1.Service) *ipset.Service {
	s := ipset.ServiceOf(svc)
	s.Namespace = in.str(s.Namespace)
	s.Type = corev1.ServiceType(in.str(string(s.Type)))
	s.Families = in.families(s.Families)
	s.FamilyPolicy = sharedPtr(in, s.FamilyPolicy)
	for i := range s.Ports {
		s.Ports[i].Protocol = corev1.Protocol(in.str(string(s.Ports[i].Protocol)))
	}
	for i := range s.Ingress {
		s.Ingress[i].IPMode = sharedPtr(in, s.Ingress[i].IPMode)
	}
	return s
}

// keepOfSlice keeps of an EndpointSlice its identity, its Service's name
// and, per node, the best readiness of its endpoints there (one endpoint
// each, sorted by node): where the Service's traffic is delivered, all
// that package endpoints reads. The kubernetes Service's keep their
// addresses too, the API server's (never bound). Every Service has a slice
// and a slice up to a hundred endpoints; their addresses, ports, target
// references, zones and hints are what eipd never reads.
func (in *interner) keepOfSlice(es *discoveryv1.EndpointSlice) {
	api := isAPIEndpoints(es)
	var svc map[string]string
	if name, ok := es.Labels[discoveryv1.LabelServiceName]; ok {
		svc = in.labelSet(map[string]string{discoveryv1.LabelServiceName: name})
	}
	es.ObjectMeta = metav1.ObjectMeta{Name: es.Name, Namespace: in.str(es.Namespace), ResourceVersion: es.ResourceVersion, Labels: svc}
	es.Ports = nil
	if api {
		for i, ep := range es.Endpoints {
			es.Endpoints[i] = discoveryv1.Endpoint{Addresses: ep.Addresses}
		}
		return
	}
	nodes := endpoints.Nodes([]*discoveryv1.EndpointSlice{es})
	kept := make([]discoveryv1.Endpoint, 0, len(nodes))
	for _, node := range slices.Sorted(maps.Keys(nodes)) {
		kept = append(kept, discoveryv1.Endpoint{NodeName: sharedPtr(in, &node), Conditions: in.conditions(nodes[node])})
	}
	es.Endpoints = kept
}

// conditions are shared conditions that endpoints.Of reads as r.
func (in *interner) conditions(r endpoints.Readiness) discoveryv1.EndpointConditions {
	yes, no := true, false
	t, f := sharedPtr(in, &yes), sharedPtr(in, &no)
	switch r {
	case endpoints.Ready:
		return discoveryv1.EndpointConditions{Ready: t, Serving: t, Terminating: f}
	case endpoints.Leaving:
		return discoveryv1.EndpointConditions{Ready: f, Serving: t, Terminating: t}
	}
	return discoveryv1.EndpointConditions{Ready: f, Serving: f, Terminating: f}
}

// isAPIEndpoints: obj is an EndpointSlice of the kubernetes Service.
func isAPIEndpoints(obj any) bool {
	es, ok := obj.(*discoveryv1.EndpointSlice)
	return ok && es.Namespace == listwatch.APIServiceNamespace && es.Labels[discoveryv1.LabelServiceName] == listwatch.APIService
}
