package ipset

import (
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Service is what eip reads of a Service: what decides its IPs (Compute),
// what the allocator reads (package alloc), and where its traffic is
// served. eipd's cache keeps each Service as one: a decoded Service is a
// 600-byte struct before its strings, slices and the cache's bookkeeping,
// which at 10,000 Services was a third of eipd's heap.
//
// A Service is never changed once made: caches share it.
type Service struct {
	Namespace, Name string
	UID             types.UID
	ResourceVersion string
	Created         time.Time // creationTimestamp
	Deleting        bool      // deletionTimestamp is set
	// Annotations are the Service's annotations that eip reads (see
	// ServiceOf), nil if none; TooLong names those it does not keep,
	// being longer than MaxAnnotation.
	Annotations    map[string]string
	TooLong        []string
	Type           corev1.ServiceType
	Class          *string // spec.loadBalancerClass
	ExternalIPs    []string
	LoadBalancerIP string
	Families       []corev1.IPFamily
	FamilyPolicy   *corev1.IPFamilyPolicy
	Ports          []Port
	// Local: externalTrafficPolicy is Local.
	Local               bool
	HealthCheckNodePort int32
	// Ingress is status.loadBalancer.ingress.
	Ingress []corev1.LoadBalancerIngress
}

// Port is a port a Service exposes.
type Port struct {
	Protocol corev1.Protocol
	Port     int32
}

func (p Port) String() string { return fmt.Sprintf("%s/%d", p.Protocol, p.Port) }

// MaxAnnotation is the longest annotation eip keeps of a Service: a node
// list, a sharing key, a few addresses or range names. Every eipd keeps
// every Service, so what one tenant writes into its Services is held by
// every node at once: a longer one is not kept, and refused (TooLong).
const MaxAnnotation = 1 << 10

// readAnnotation reports whether eip reads annotation key of a Service.
func readAnnotation(key string) bool {
	switch key {
	case AnnotationSharingKey, AnnotationShareWith, AnnotationPreferredNodes, AnnotationIPs, AnnotationRange:
		return true
	}
	return false
}

// ServiceOf is what eip reads of svc. It shares svc's strings and slices.
// A Service that names no IP and that eip may not serve is kept as its
// key, type and class alone: a cluster's Services are mostly such, and what a tenant puts
// into them (ports, annotations) must not cost every eipd memory.
func ServiceOf(svc *corev1.Service) *Service {
	s := &Service{
		Namespace: svc.Namespace, Name: svc.Name, UID: svc.UID, ResourceVersion: svc.ResourceVersion,
		Type: svc.Spec.Type, Class: svc.Spec.LoadBalancerClass,
	}
	if !namesIP(svc) && !mayBeOurs(s) {
		return s
	}
	*s = Service{
		Namespace: svc.Namespace, Name: svc.Name, UID: svc.UID, ResourceVersion: svc.ResourceVersion,
		Created: svc.CreationTimestamp.Time, Deleting: svc.DeletionTimestamp != nil,
		Type: svc.Spec.Type, Class: svc.Spec.LoadBalancerClass,
		ExternalIPs: svc.Spec.ExternalIPs, LoadBalancerIP: svc.Spec.LoadBalancerIP,
		Families: svc.Spec.IPFamilies, FamilyPolicy: svc.Spec.IPFamilyPolicy,
		Local:               svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal,
		HealthCheckNodePort: svc.Spec.HealthCheckNodePort,
		Ingress:             svc.Status.LoadBalancer.Ingress,
	}
	for k, v := range svc.Annotations {
		switch {
		case !readAnnotation(k):
		case len(v) > MaxAnnotation:
			s.TooLong = append(s.TooLong, k)
		default:
			if s.Annotations == nil {
				s.Annotations = map[string]string{}
			}
			s.Annotations[k] = v
		}
	}
	slices.Sort(s.TooLong)
	if len(svc.Spec.Ports) > 0 {
		s.Ports = make([]Port, len(svc.Spec.Ports))
		for i, p := range svc.Spec.Ports {
			s.Ports[i] = Port{Protocol: p.Protocol, Port: p.Port}
		}
	}
	return s
}

// namesIP reports whether svc names an address: in spec.externalIPs,
// spec.loadBalancerIP or its load balancer's ingress.
func namesIP(svc *corev1.Service) bool {
	return len(svc.Spec.ExternalIPs) > 0 || svc.Spec.LoadBalancerIP != "" || len(svc.Status.LoadBalancer.Ingress) > 0
}

// Key is the Service's "namespace/name".
func (s *Service) Key() string { return s.Namespace + "/" + s.Name }

// GetObjectMeta makes a Service an object a cache can key
// (meta.Accessor): by namespace and name.
func (s *Service) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name, UID: s.UID, ResourceVersion: s.ResourceVersion}
}

// Reference is the Service as the object of an Event.
func (s *Service) Reference() *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "Service", APIVersion: "v1", Namespace: s.Namespace, Name: s.Name, UID: s.UID, ResourceVersion: s.ResourceVersion}
}
