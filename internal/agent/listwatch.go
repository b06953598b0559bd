package agent

import (
	"context"
	"errors"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

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

// usePatientInformers registers with f patient informers for what the agent
// watches (package listwatch); the factory's typed accessors
// (f.Core().V1()…) then return them.
func (a *Agent) usePatientInformers(f informers.SharedInformerFactory) {
	set := listwatch.For(a.opt.Client, a.opt.Namespace, a.opt.ConfigMap)
	for obj, lw := range map[runtime.Object]*cache.ListWatch{
		&corev1.Service{}: set.Services, &corev1.Node{}: set.Nodes,
		&coordinationv1.Lease{}: set.Leases, &corev1.ConfigMap{}: set.ConfigMap,
		&discoveryv1.EndpointSlice{}: set.APIEndpoints,
	} {
		f.InformerFor(obj, func(_ kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
			inf := cache.NewSharedIndexInformer(patient{lw: lw, every: apiRetry, clk: a.clk}, obj, resync, indexers())
			// Set before the informer starts, so it cannot fail.
			_ = inf.SetTransform(keepWhatIsRead)
			return inf
		})
	}
}

// roleIndex indexes eip's Leases by their role (heartbeat or lock): a peer's
// renewal reads the heartbeats, a few dozen Leases among thousands of locks.
const roleIndex = "role"

func indexers() cache.Indexers {
	return cache.Indexers{
		cache.NamespaceIndex: cache.MetaNamespaceIndexFunc,
		roleIndex: func(obj any) ([]string, error) {
			if l, ok := obj.(*coordinationv1.Lease); ok && l.Labels[lease.RoleLabel] != "" {
				return []string{l.Labels[lease.RoleLabel]}, nil
			}
			return nil, nil
		},
	}
}

// keepWhatIsRead drops, before an object enters a cache, what eipd never
// reads: every object's managedFields (often larger than the rest of a
// Lease), of a Node everything in its status but its addresses (images
// and conditions are most of a real Node), and of a Service all but what
// decides its IPs (keepOfService). eipd writes Leases from its cache, and
// patches only the load-balancer ingress of a Service's status, never
// Nodes; an update whose managedFields are unset leaves the API server's
// unchanged.
func keepWhatIsRead(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	switch o := obj.(type) {
	case *corev1.Node:
		o.Status = corev1.NodeStatus{Addresses: o.Status.Addresses}
	case *corev1.Service:
		keepOfService(o)
	}
	return obj, nil
}

// keepOfService keeps of svc its identity, its eip.io/ annotations and what
// ipset and alloc read: type, class, external and requested addresses,
// families, ports and the load-balancer ingress. A cluster's Services
// carry labels, selectors, cluster IPs, kubectl's last applied
// configuration and status conditions that eipd never looks at: with
// thousands of Services they were most of its memory.
func keepOfService(svc *corev1.Service) {
	svc.ObjectMeta = metav1.ObjectMeta{
		Name: svc.Name, Namespace: svc.Namespace, UID: svc.UID, ResourceVersion: svc.ResourceVersion,
		CreationTimestamp: svc.CreationTimestamp, DeletionTimestamp: svc.DeletionTimestamp,
		Annotations: eipAnnotations(svc.Annotations),
	}
	ports := make([]corev1.ServicePort, len(svc.Spec.Ports))
	for i, p := range svc.Spec.Ports {
		ports[i] = corev1.ServicePort{Protocol: p.Protocol, Port: p.Port}
	}
	if len(ports) == 0 {
		ports = nil
	}
	svc.Spec = corev1.ServiceSpec{
		Type: svc.Spec.Type, LoadBalancerClass: svc.Spec.LoadBalancerClass,
		ExternalIPs: svc.Spec.ExternalIPs, LoadBalancerIP: svc.Spec.LoadBalancerIP,
		IPFamilies: svc.Spec.IPFamilies, IPFamilyPolicy: svc.Spec.IPFamilyPolicy, Ports: ports,
	}
	svc.Status = corev1.ServiceStatus{LoadBalancer: svc.Status.LoadBalancer}
}

// eipAnnotations are the annotations of m under eip.io/, nil if none.
func eipAnnotations(m map[string]string) map[string]string {
	var out map[string]string
	for k, v := range m {
		if strings.HasPrefix(k, annotationPrefix) {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}

// annotationPrefix is the prefix of every annotation eip reads on a Service.
const annotationPrefix = "eip.io/"
