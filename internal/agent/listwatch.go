package agent

import (
	"context"
	"errors"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/eip-project/eip/internal/lease"
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

// informerFunc lists and watches one resource with the factory's client.
type informerFunc struct {
	list  func(context.Context, kubernetes.Interface, metav1.ListOptions) (runtime.Object, error)
	watch func(context.Context, kubernetes.Interface, metav1.ListOptions) (watch.Interface, error)
	tweak func(*metav1.ListOptions)
}

// usePatientInformer makes f's informer for obj's type a patient one; the
// factory's typed accessors (f.Core().V1()…) then return it.
func (a *Agent) usePatientInformer(f informers.SharedInformerFactory, obj runtime.Object, fn informerFunc) {
	f.InformerFor(obj, func(c kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
		tweak := func(o metav1.ListOptions) metav1.ListOptions {
			if fn.tweak != nil {
				fn.tweak(&o)
			}
			return o
		}
		lw := &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return fn.list(ctx, c, tweak(o))
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return fn.watch(ctx, c, tweak(o))
			},
		}
		return cache.NewSharedIndexInformer(patient{lw: lw, every: apiRetry, clk: a.clk}, obj, resync,
			cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	})
}

// usePatientInformers registers with f patient informers for what the agent
// watches: Services and Nodes cluster-wide, and in its namespace the Leases
// eip manages and its one ConfigMap.
func (a *Agent) usePatientInformers(f informers.SharedInformerFactory) {
	ns := a.opt.Namespace
	a.usePatientInformer(f, &corev1.Service{}, informerFunc{
		list: func(ctx context.Context, c kubernetes.Interface, o metav1.ListOptions) (runtime.Object, error) {
			return c.CoreV1().Services(metav1.NamespaceAll).List(ctx, o)
		},
		watch: func(ctx context.Context, c kubernetes.Interface, o metav1.ListOptions) (watch.Interface, error) {
			return c.CoreV1().Services(metav1.NamespaceAll).Watch(ctx, o)
		},
	})
	a.usePatientInformer(f, &corev1.Node{}, informerFunc{
		list: func(ctx context.Context, c kubernetes.Interface, o metav1.ListOptions) (runtime.Object, error) {
			return c.CoreV1().Nodes().List(ctx, o)
		},
		watch: func(ctx context.Context, c kubernetes.Interface, o metav1.ListOptions) (watch.Interface, error) {
			return c.CoreV1().Nodes().Watch(ctx, o)
		},
	})
	a.usePatientInformer(f, &coordinationv1.Lease{}, informerFunc{
		list: func(ctx context.Context, c kubernetes.Interface, o metav1.ListOptions) (runtime.Object, error) {
			return c.CoordinationV1().Leases(ns).List(ctx, o)
		},
		watch: func(ctx context.Context, c kubernetes.Interface, o metav1.ListOptions) (watch.Interface, error) {
			return c.CoordinationV1().Leases(ns).Watch(ctx, o)
		},
		tweak: func(o *metav1.ListOptions) { o.LabelSelector = lease.ManagedByLabel + "=" + lease.ManagedBy },
	})
	a.usePatientInformer(f, &corev1.ConfigMap{}, informerFunc{
		list: func(ctx context.Context, c kubernetes.Interface, o metav1.ListOptions) (runtime.Object, error) {
			return c.CoreV1().ConfigMaps(ns).List(ctx, o)
		},
		watch: func(ctx context.Context, c kubernetes.Interface, o metav1.ListOptions) (watch.Interface, error) {
			return c.CoreV1().ConfigMaps(ns).Watch(ctx, o)
		},
		tweak: func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", a.opt.ConfigMap).String()
		},
	})
}
