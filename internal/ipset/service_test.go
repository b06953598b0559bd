package ipset_test

import (
	"strings"
	"testing"

	"gotest.tools/v3/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/eip-project/eip/internal/ipset"
)

// ServiceOf keeps of a Service only what eip reads: of one that names no
// IP and that eip may not serve, its key; of the others, the annotations
// eip reads, each at most ipset.MaxAnnotation long, and the names of those
// longer.
func TestServiceOfKeepsOnlyWhatEipReads(t *testing.T) {
	long := strings.Repeat("n", ipset.MaxAnnotation+1)
	annotations := map[string]string{"eip.io/junk": "x", ipset.AnnotationSharingKey: "k", ipset.AnnotationPreferredNodes: long, "example.com/other": "y"}
	internal := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db", UID: "u", ResourceVersion: "3", Annotations: annotations},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Ports: []corev1.ServicePort{{Protocol: corev1.ProtocolTCP, Port: 5432}}}}
	assert.DeepEqual(t, ipset.ServiceOf(internal), &ipset.Service{Namespace: "ns", Name: "db", UID: "u", ResourceVersion: "3", Type: corev1.ServiceTypeClusterIP})

	external := internal.DeepCopy()
	external.Spec.ExternalIPs = []string{"198.18.100.1"}
	s := ipset.ServiceOf(external)
	assert.DeepEqual(t, s.Annotations, map[string]string{ipset.AnnotationSharingKey: "k"})
	assert.DeepEqual(t, s.TooLong, []string{ipset.AnnotationPreferredNodes})
	assert.DeepEqual(t, s.Ports, []ipset.Port{{corev1.ProtocolTCP, 5432}})

	lb := internal.DeepCopy()
	lb.Spec.Type = corev1.ServiceTypeLoadBalancer
	// eip's, though it names no IP yet.
	assert.DeepEqual(t, ipset.ServiceOf(lb).Annotations, map[string]string{ipset.AnnotationSharingKey: "k"})
}
