package endpoints

import (
	"testing"

	"gotest.tools/v3/assert"
	discoveryv1 "k8s.io/api/discovery/v1"
)

func ptr[T any](v T) *T { return &v }

func TestOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    discoveryv1.EndpointConditions
		want Readiness
	}{
		{"all unset means ready", discoveryv1.EndpointConditions{}, Ready},
		{"ready", discoveryv1.EndpointConditions{Ready: ptr(true), Serving: ptr(true), Terminating: ptr(false)}, Ready},
		{"not ready", discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(false)}, None},
		{"not ready, serving unset", discoveryv1.EndpointConditions{Ready: ptr(false)}, None},
		{"terminating and serving", discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(true), Terminating: ptr(true)}, Leaving},
		{"terminating, no longer serving", discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(false), Terminating: ptr(true)}, None},
		{"terminating, serving unset, ready unset", discoveryv1.EndpointConditions{Terminating: ptr(true)}, Leaving},
	} {
		t.Run(tc.name, func(t *testing.T) { assert.Equal(t, Of(tc.c), tc.want) })
	}
}

func ep(node string, r Readiness) discoveryv1.Endpoint {
	e := discoveryv1.Endpoint{Addresses: []string{"10.0.0.1"}}
	if node != "" {
		e.NodeName = ptr(node)
	}
	switch r {
	case Ready:
		e.Conditions = discoveryv1.EndpointConditions{Ready: ptr(true), Serving: ptr(true), Terminating: ptr(false)}
	case Leaving:
		e.Conditions = discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(true), Terminating: ptr(true)}
	default:
		e.Conditions = discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(false), Terminating: ptr(false)}
	}
	return e
}

func TestNodesTakesEachNodesBestEndpoint(t *testing.T) {
	got := Nodes([]*discoveryv1.EndpointSlice{
		{Endpoints: []discoveryv1.Endpoint{ep("a", Leaving), ep("b", None), ep("", Ready)}},
		{Endpoints: []discoveryv1.Endpoint{ep("a", Ready), ep("c", Leaving)}},
	})
	assert.DeepEqual(t, got, map[string]Readiness{"a": Ready, "c": Leaving})
}

func TestEligible(t *testing.T) {
	for _, tc := range []struct {
		name     string
		services []map[string]Readiness
		want     Eligibility
	}{
		{"no Local Service", nil, Eligibility{}},
		{"no endpoint anywhere", []map[string]Readiness{{}}, Eligibility{}},
		{"only endpoints not ready", []map[string]Readiness{{"a": None}}, Eligibility{}},
		{"ready nodes, sorted", []map[string]Readiness{{"c": Ready, "a": Ready, "b": None}}, Eligibility{Nodes: []string{"a", "c"}}},
		{"a ready node wins over a leaving one", []map[string]Readiness{{"a": Leaving, "b": Ready}}, Eligibility{Nodes: []string{"b"}}},
		{"only leaving endpoints: they keep the IP", []map[string]Readiness{{"a": Leaving, "b": None}}, Eligibility{Nodes: []string{"a"}, Leaving: true}},
		{"shared: a node ready for both", []map[string]Readiness{{"a": Ready, "b": Ready}, {"b": Ready, "c": Ready}}, Eligibility{Nodes: []string{"b"}}},
		{"shared: no node has both", []map[string]Readiness{{"a": Ready}, {"b": Ready}}, Eligibility{}},
		{"shared: leaving for one, ready for the other", []map[string]Readiness{{"a": Ready}, {"a": Leaving}}, Eligibility{Nodes: []string{"a"}, Leaving: true}},
		{"shared: the ready-for-all node beats one leaving for one", []map[string]Readiness{{"a": Ready, "b": Ready}, {"a": Leaving, "b": Ready}}, Eligibility{Nodes: []string{"b"}}},
		{"rolling update: a delivered node wins over a pending and a leaving one", []map[string]Readiness{{"a": Leaving, "b": Ready, "c": Pending}}, Eligibility{Nodes: []string{"b"}}},
		{"one replica moving: the leaving node alone keeps it while the new one is pending", []map[string]Readiness{{"a": Leaving, "c": Pending}}, Eligibility{Nodes: []string{"a"}, Pending: []string{"c"}}},
		{"shared: leaving for one and pending for the other, beside a pending node", []map[string]Readiness{{"a": Leaving, "b": Pending}, {"a": Pending, "b": Pending}}, Eligibility{Nodes: []string{"a"}, Pending: []string{"b"}}},
		{"the old pod stopped serving: the pending node", []map[string]Readiness{{"a": None, "c": Pending}}, Eligibility{Nodes: []string{"c"}, Pending: []string{"c"}}},
		{"shared: pending for one, ready for the other", []map[string]Readiness{{"a": Ready}, {"a": Pending}}, Eligibility{Nodes: []string{"a"}, Pending: []string{"a"}}},
	} {
		t.Run(tc.name, func(t *testing.T) { assert.DeepEqual(t, Eligible(tc.services), tc.want) })
	}
}

func TestWhy(t *testing.T) {
	assert.Equal(t, Eligibility{}.Why([]string{"ns/web"}), "no node has a ready endpoint of ns/web (externalTrafficPolicy: Local)")
	assert.Equal(t, Eligibility{}.Why([]string{"ns/a", "ns/b"}), "no node has a ready endpoint of every one of ns/a, ns/b (externalTrafficPolicy: Local)")
	assert.Equal(t, Eligibility{Nodes: []string{"n1"}, Leaving: true}.Why([]string{"ns/web"}), "only terminating endpoints of ns/web still serve, on n1")
	assert.Equal(t, Eligibility{Nodes: []string{"n1", "n2"}}.Why([]string{"ns/web"}), "externalTrafficPolicy: Local; ready endpoints on n1, n2")
	assert.Equal(t, Eligibility{Nodes: []string{"n1"}, Pending: []string{"n2"}}.Why([]string{"ns/web"}),
		"kube-proxy does not yet deliver to the ready endpoints of ns/web on n2; meanwhile serving on n1")
}

// A holder waits for kube-proxy only where its own endpoints still serve
// and another node's are pending; not where it may not keep the IP, nor
// with no node pending.
func TestWaitsFor(t *testing.T) {
	moving := Eligible([]map[string]Readiness{{"a": Leaving, "b": Pending, "c": Pending}})
	assert.DeepEqual(t, moving.WaitsFor("a"), []string{"b", "c"})
	assert.DeepEqual(t, moving.WaitsFor("b"), []string(nil))
	assert.DeepEqual(t, Eligible([]map[string]Readiness{{"a": Leaving, "b": Ready}}).WaitsFor("a"), []string(nil))
	assert.DeepEqual(t, Eligible([]map[string]Readiness{{"a": None, "b": Pending}}).WaitsFor("b"), []string(nil))
	assert.DeepEqual(t, Eligible([]map[string]Readiness{{"a": Leaving}}).WaitsFor("a"), []string(nil))
}
