// Package clientset adapts client-go's Clientset to kubeclient.Interface:
// for tests, whose fake Clientset records and answers calls, and for
// kubectl-eip. eipd itself does not import it (see package kubeclient).
package clientset

import (
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/eip-project/eip/internal/kubeclient"
)

// Adapt returns c as a kubeclient.Interface.
func Adapt(c kubernetes.Interface) kubeclient.Interface { return adapted{c} }

type adapted struct{ c kubernetes.Interface }

func (a adapted) Services(namespace string) kubeclient.Resource[*corev1.Service, *corev1.ServiceList] {
	return a.c.CoreV1().Services(namespace)
}

func (a adapted) Nodes() kubeclient.Resource[*corev1.Node, *corev1.NodeList] {
	return a.c.CoreV1().Nodes()
}

func (a adapted) ConfigMaps(namespace string) kubeclient.Resource[*corev1.ConfigMap, *corev1.ConfigMapList] {
	return a.c.CoreV1().ConfigMaps(namespace)
}

func (a adapted) Secrets(namespace string) kubeclient.Resource[*corev1.Secret, *corev1.SecretList] {
	return a.c.CoreV1().Secrets(namespace)
}

func (a adapted) Events(namespace string) kubeclient.Resource[*corev1.Event, *corev1.EventList] {
	return a.c.CoreV1().Events(namespace)
}

func (a adapted) Leases(namespace string) kubeclient.Resource[*coordinationv1.Lease, *coordinationv1.LeaseList] {
	return a.c.CoordinationV1().Leases(namespace)
}

func (a adapted) EndpointSlices(namespace string) kubeclient.Resource[*discoveryv1.EndpointSlice, *discoveryv1.EndpointSliceList] {
	return a.c.DiscoveryV1().EndpointSlices(namespace)
}
