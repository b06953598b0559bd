package cli

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// slice is an EndpointSlice of Service namespace/name with a ready
// endpoint on each of nodes.
func slice(namespace, name string, nodes ...string) *discoveryv1.EndpointSlice {
	yes := true
	es := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: namespace, Name: name + "-x", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	for _, n := range nodes {
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.0.0.1"}, NodeName: &n, Conditions: discoveryv1.EndpointConditions{Ready: &yes}})
	}
	return es
}

// status says of an IP of a Service with externalTrafficPolicy: Local
// where it may live and why: the nodes with a ready endpoint, a holder
// that has none and hands it over, or no-endpoints when no node has one.
func TestStatusLocal(t *testing.T) {
	local := func(s *corev1.Service) *corev1.Service {
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		return s
	}
	objs := append(fixture(),
		local(loadBalancer("default", "here", "198.18.100.20")), lock("198.18.100.20", "node-1", 0, now.Add(-time.Minute), "default/here"),
		slice("default", "here", "node-1", "node-2"),
		local(loadBalancer("default", "there", "198.18.100.21")), lock("198.18.100.21", "node-1", 0, now.Add(-time.Minute), "default/there"),
		slice("default", "there", "node-2"),
		local(loadBalancer("default", "nowhere", "198.18.100.22")),
		slice("default", "nowhere"),
		local(loadBalancer("default", "moving", "198.18.100.23")), lock("198.18.100.23", "node-1", 0, now.Add(-time.Minute), "default/moving"),
		leaving(slice("default", "moving", "node-1", "node-2"), "node-1"),
	)
	h := newHarness(t, objs...)
	out, err := h.run(context.Background(), "status", "-o", "json", "198.18.100.20", "198.18.100.21", "198.18.100.22", "198.18.100.23")
	assert.NilError(t, err)
	var st Status
	assert.NilError(t, json.Unmarshal([]byte(out), &st))
	assert.Equal(t, len(st.IPs), 4)
	here, there, nowhere, moving := st.IPs[0], st.IPs[1], st.IPs[2], st.IPs[3]
	assert.Equal(t, here.State, StateBound)
	assert.Equal(t, here.Reason, "externalTrafficPolicy: Local; ready endpoints on node-1, node-2")
	assert.Equal(t, there.State, StateBound)
	assert.Equal(t, there.Reason, "holder node-1 has no ready endpoint here; it hands the IP to node-2")
	assert.Equal(t, nowhere.State, StateNoEndpoints)
	assert.Equal(t, nowhere.Reason, "no node has a ready endpoint of default/nowhere (externalTrafficPolicy: Local)")
	assert.Equal(t, moving.State, StateBound)
	assert.Equal(t, moving.Reason, "endpoints of default/moving on holder node-1 are terminating but still serve; it hands the IP to node-2 once kube-proxy there delivers to the ready ones (Event WaitingForKubeProxy)")
}

// leaving makes the endpoints of es on node terminating but serving.
func leaving(es *discoveryv1.EndpointSlice, node string) *discoveryv1.EndpointSlice {
	yes, no := true, false
	for i, ep := range es.Endpoints {
		if *ep.NodeName == node {
			es.Endpoints[i].Conditions = discoveryv1.EndpointConditions{Ready: &no, Serving: &yes, Terminating: &yes}
		}
	}
	return es
}
