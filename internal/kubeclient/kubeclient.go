package kubeclient

import (
	"context"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/gentype"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// Resource is the calls eipd makes on one kind of object, T, whose list
// is L. client-go's typed clients (and their fakes) have these methods.
type Resource[T, L runtime.Object] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error)
}

// Interface is eipd's view of the API server. Namespaced kinds take a
// namespace; "" (metav1.NamespaceAll) lists and watches all of them.
type Interface interface {
	Services(namespace string) Resource[*corev1.Service, *corev1.ServiceList]
	Nodes() Resource[*corev1.Node, *corev1.NodeList]
	ConfigMaps(namespace string) Resource[*corev1.ConfigMap, *corev1.ConfigMapList]
	Secrets(namespace string) Resource[*corev1.Secret, *corev1.SecretList]
	Events(namespace string) Resource[*corev1.Event, *corev1.EventList]
	Leases(namespace string) Resource[*coordinationv1.Lease, *coordinationv1.LeaseList]
	EndpointSlices(namespace string) Resource[*discoveryv1.EndpointSlice, *discoveryv1.EndpointSliceList]
}

// NewScheme returns a scheme of the API groups Interface reaches, with
// the option types (ListOptions…) that requests encode as parameters. An
// event recorder needs one to name the kind of the object it reports on.
func NewScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, coordinationv1.AddToScheme, discoveryv1.AddToScheme} {
		if err := add(s); err != nil {
			return nil, fmt.Errorf("scheme: %w", err)
		}
	}
	return s, nil
}

// Client is Interface over the API server of a rest.Config.
type Client struct {
	params                        runtime.ParameterCodec
	core, coordination, discovery rest.Interface
}

var _ Interface = (*Client)(nil)

// NewForConfig returns a Client for cfg, as kubernetes.NewForConfig does
// for a Clientset: every group shares one HTTP client (so one connection)
// and one rate limiter of cfg.QPS and cfg.Burst.
func NewForConfig(cfg *rest.Config) (*Client, error) {
	c := *cfg
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	if c.RateLimiter == nil && c.QPS > 0 {
		if c.Burst <= 0 {
			return nil, fmt.Errorf("kubernetes client: burst must be positive when QPS is set")
		}
		c.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(c.QPS, c.Burst)
	}
	httpClient, err := rest.HTTPClientFor(&c)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	s, err := NewScheme()
	if err != nil {
		return nil, err
	}
	codecs := serializer.NewCodecFactory(s).WithoutConversion()
	out := &Client{params: runtime.NewParameterCodec(s)}
	for _, g := range []struct {
		into    *rest.Interface
		version schema.GroupVersion
		path    string
	}{
		{&out.core, corev1.SchemeGroupVersion, "/api"},
		{&out.coordination, coordinationv1.SchemeGroupVersion, "/apis"},
		{&out.discovery, discoveryv1.SchemeGroupVersion, "/apis"},
	} {
		gc := c
		gc.GroupVersion, gc.APIPath, gc.NegotiatedSerializer = &g.version, g.path, codecs
		rc, err := rest.RESTClientForConfigAndClient(&gc, httpClient)
		if err != nil {
			return nil, fmt.Errorf("kubernetes client of %s: %w", g.version, err)
		}
		*g.into = rc
	}
	return out, nil
}

// object is what gentype asks of a kind: an API object with metadata.
type object interface {
	runtime.Object
	metav1.Object
}

// typed is the client of one resource of a group, in one namespace.
func typed[T object, L runtime.Object](c *Client, rc rest.Interface, resource, namespace string, newObj func() T, newList func() L) Resource[T, L] {
	return gentype.NewClientWithList(resource, rc, c.params, namespace, newObj, newList, gentype.PrefersProtobuf[T]())
}

func (c *Client) Services(namespace string) Resource[*corev1.Service, *corev1.ServiceList] {
	return typed(c, c.core, "services", namespace, func() *corev1.Service { return &corev1.Service{} }, func() *corev1.ServiceList { return &corev1.ServiceList{} })
}

func (c *Client) Nodes() Resource[*corev1.Node, *corev1.NodeList] {
	return typed(c, c.core, "nodes", "", func() *corev1.Node { return &corev1.Node{} }, func() *corev1.NodeList { return &corev1.NodeList{} })
}

func (c *Client) ConfigMaps(namespace string) Resource[*corev1.ConfigMap, *corev1.ConfigMapList] {
	return typed(c, c.core, "configmaps", namespace, func() *corev1.ConfigMap { return &corev1.ConfigMap{} }, func() *corev1.ConfigMapList { return &corev1.ConfigMapList{} })
}

func (c *Client) Secrets(namespace string) Resource[*corev1.Secret, *corev1.SecretList] {
	return typed(c, c.core, "secrets", namespace, func() *corev1.Secret { return &corev1.Secret{} }, func() *corev1.SecretList { return &corev1.SecretList{} })
}

func (c *Client) Events(namespace string) Resource[*corev1.Event, *corev1.EventList] {
	return typed(c, c.core, "events", namespace, func() *corev1.Event { return &corev1.Event{} }, func() *corev1.EventList { return &corev1.EventList{} })
}

func (c *Client) Leases(namespace string) Resource[*coordinationv1.Lease, *coordinationv1.LeaseList] {
	return typed(c, c.coordination, "leases", namespace, func() *coordinationv1.Lease { return &coordinationv1.Lease{} }, func() *coordinationv1.LeaseList { return &coordinationv1.LeaseList{} })
}

func (c *Client) EndpointSlices(namespace string) Resource[*discoveryv1.EndpointSlice, *discoveryv1.EndpointSliceList] {
	return typed(c, c.discovery, "endpointslices", namespace, func() *discoveryv1.EndpointSlice { return &discoveryv1.EndpointSlice{} }, func() *discoveryv1.EndpointSliceList { return &discoveryv1.EndpointSliceList{} })
}

// EventSink posts an event recorder's Events (record.EventSink) through
// Interface, as client-go's EventSinkImpl does through a Clientset.
type EventSink struct {
	Client Interface
}

func (s EventSink) Create(e *corev1.Event) (*corev1.Event, error) {
	return s.Client.Events(e.Namespace).Create(context.TODO(), e, metav1.CreateOptions{})
}

func (s EventSink) Update(e *corev1.Event) (*corev1.Event, error) {
	return s.Client.Events(e.Namespace).Update(context.TODO(), e, metav1.UpdateOptions{})
}

func (s EventSink) Patch(e *corev1.Event, data []byte) (*corev1.Event, error) {
	return s.Client.Events(e.Namespace).Patch(context.TODO(), e.Name, types.StrategicMergePatchType, data, metav1.PatchOptions{})
}
