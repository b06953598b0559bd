package listwatch

import (
	"context"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/eip-project/eip/internal/kubeclient"
	"github.com/eip-project/eip/internal/lease"
)

// LeaseSelector selects eip's Leases, heartbeats and locks alike.
const LeaseSelector = lease.ManagedByLabel + "=" + lease.ManagedBy

// Set is one ListWatch for each kind of object eip reads.
type Set struct {
	Services, Nodes, Leases, ConfigMap *cache.ListWatch
	// APIEndpoints is the EndpointSlices of the kubernetes Service in
	// default: the API server's own addresses.
	APIEndpoints *cache.ListWatch
	// EndpointSlices is every EndpointSlice: where each Service has ready
	// endpoints (externalTrafficPolicy: Local), and the kubernetes
	// Service's among them.
	EndpointSlices *cache.ListWatch
}

// APIServiceNamespace and APIService name the Service through which pods
// reach the API server; its EndpointSlices list the API server's addresses.
const (
	APIServiceNamespace = "default"
	APIService          = "kubernetes"
)

// APIEndpointsSelector selects the EndpointSlices of the kubernetes Service.
const APIEndpointsSelector = discoveryv1.LabelServiceName + "=" + APIService

// For returns the ListWatches of client c: Services, Nodes and
// EndpointSlices everywhere, the kubernetes Service's EndpointSlices in
// default, eip's Leases in
// namespace and the ConfigMap named configMap there.
func For(c kubeclient.Interface, namespace, configMap string) Set {
	byName := fields.OneTermEqualSelector("metadata.name", configMap).String()
	return Set{
		Services: of(nil,
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return c.Services(metav1.NamespaceAll).List(ctx, o)
			},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return c.Services(metav1.NamespaceAll).Watch(ctx, o)
			}),
		Nodes: of(nil,
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return c.Nodes().List(ctx, o)
			},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return c.Nodes().Watch(ctx, o)
			}),
		Leases: of(func(o *metav1.ListOptions) { o.LabelSelector = LeaseSelector },
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return c.Leases(namespace).List(ctx, o)
			},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return c.Leases(namespace).Watch(ctx, o)
			}),
		APIEndpoints: of(func(o *metav1.ListOptions) { o.LabelSelector = APIEndpointsSelector },
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return c.EndpointSlices(APIServiceNamespace).List(ctx, o)
			},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return c.EndpointSlices(APIServiceNamespace).Watch(ctx, o)
			}),
		EndpointSlices: of(nil,
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return c.EndpointSlices(metav1.NamespaceAll).List(ctx, o)
			},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return c.EndpointSlices(metav1.NamespaceAll).Watch(ctx, o)
			}),
		ConfigMap: of(func(o *metav1.ListOptions) { o.FieldSelector = byName },
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return c.ConfigMaps(namespace).List(ctx, o)
			},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return c.ConfigMaps(namespace).Watch(ctx, o)
			}),
	}
}

// of is a ListWatch whose list and watch options pass through narrow
// first, when it is not nil.
func of(narrow func(*metav1.ListOptions), list cache.ListWithContextFunc, watchFn cache.WatchFuncWithContext) *cache.ListWatch {
	if narrow == nil {
		narrow = func(*metav1.ListOptions) {}
	}
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			narrow(&o)
			return list(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			narrow(&o)
			return watchFn(ctx, o)
		},
	}
}
