package ipset_test

import (
	"testing"

	"gotest.tools/v3/assert"
	corev1 "k8s.io/api/core/v1"
)

func local(s *corev1.Service) {
	s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
}

// An entry lists the Services with externalTrafficPolicy: Local that it
// serves, sorted, and only those let in: a refused Service's policy
// decides nothing.
func TestComputeLocalServices(t *testing.T) {
	cfg := mustParse(t, map[string]string{"ranges": ranges, "iface": "eth0"})
	entries, _ := compute([]*corev1.Service{
		service("a/web", loadBalancer("", "198.18.0.5"), local),
		service("a/api", externalIPs("198.18.0.5"), local),
		service("a/cluster", externalIPs("198.18.0.5")),
		service("b/stranger", externalIPs("198.18.0.5"), local),
		service("a/plain", externalIPs("198.18.0.6")),
	}, cfg, nil)
	assert.Equal(t, len(entries), 2)
	assert.DeepEqual(t, entries[0].Services, []string{"a/api", "a/cluster", "a/web"})
	assert.DeepEqual(t, entries[0].Local, []string{"a/api", "a/web"})
	assert.Assert(t, entries[1].Local == nil)
}
