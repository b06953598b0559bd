package endpoints

import (
	"slices"
	"strings"

	discoveryv1 "k8s.io/api/discovery/v1"
)

// Readiness is what kube-proxy on one node can do with a Service's traffic.
type Readiness int

const (
	// None: no endpoint of the Service on the node serves; its traffic
	// is dropped there.
	None Readiness = iota
	// Leaving: the node's endpoints are terminating but still serving.
	// kube-proxy falls back to them while no ready one exists, and they
	// stop serving soon (a rolling update, a scale-down).
	Leaving
	// Pending: an endpoint on the node is ready and not terminating, but
	// kube-proxy there has not yet said it delivers to it (Checks): its
	// rules lag the EndpointSlice by up to its sync period, a second.
	Pending
	// Ready: an endpoint on the node is ready and not terminating.
	Ready
)

// Of is the readiness of one endpoint by its conditions, read as the API
// documents them: a nil ready or serving is true, serving defaults to
// ready, and a nil terminating is false.
func Of(c discoveryv1.EndpointConditions) Readiness {
	ready := c.Ready == nil || *c.Ready
	serving := ready
	if c.Serving != nil {
		serving = *c.Serving
	}
	switch {
	case c.Terminating != nil && *c.Terminating:
		if serving {
			return Leaving
		}
		return None
	case ready:
		return Ready
	}
	return None
}

// Nodes returns, for each node with a serving endpoint among the slices
// of one Service, the best readiness of its endpoints there. An endpoint
// without nodeName is on no node and counts nowhere.
func Nodes(slices []*discoveryv1.EndpointSlice) map[string]Readiness {
	out := map[string]Readiness{}
	for _, s := range slices {
		for _, ep := range s.Endpoints {
			if ep.NodeName == nil || *ep.NodeName == "" {
				continue
			}
			if r := Of(ep.Conditions); r > out[*ep.NodeName] {
				out[*ep.NodeName] = r
			}
		}
	}
	return out
}

// Eligibility is where an IP may live.
type Eligibility struct {
	// Nodes may hold the IP, sorted; none when empty.
	Nodes []string
	// Leaving: the Nodes have only endpoints that are terminating but
	// still serving, as no node has a ready one of every Service.
	Leaving bool
	// Pending are the nodes whose ready endpoints kube-proxy does not yet
	// deliver to, while no node's are. They are the Nodes only when no
	// node's endpoints still serve: otherwise the IP stays on those until
	// kube-proxy delivers on one of these.
	Pending []string
}

// Eligible returns the nodes that may hold an IP which the Services of
// services name, each given as the readiness of its nodes (Nodes): those
// where every one of them has a ready endpoint that kube-proxy there
// delivers to, so that whichever Service's traffic arrives is delivered.
// When there are none, it keeps the nodes where every one still serves,
// with a terminating endpoint at least; with none of those either, the
// nodes whose ready endpoints kube-proxy does not deliver to yet. So
// during a rolling update, or a drain that cordons the holder and evicts
// its pod, the IP leaves the old pod's node, which still serves, only for
// a node where the new pod's traffic is already delivered: a holder that
// may not keep it (cordoned) has no other node to give it to until then.
// It stays where it is as long as terminating endpoints are all there
// is. With no Service given, no node may.
func Eligible(services []map[string]Readiness) Eligibility {
	if len(services) == 0 {
		return Eligibility{}
	}
	var ready, leaving, pending []string
	for node, r := range services[0] {
		least := r
		for _, other := range services[1:] {
			least = min(least, other[node])
		}
		switch {
		case least == Ready:
			ready = append(ready, node)
		case least == Pending:
			pending = append(pending, node)
		case least == Leaving:
			leaving = append(leaving, node)
		}
	}
	if len(ready) > 0 {
		slices.Sort(ready)
		return Eligibility{Nodes: ready}
	}
	slices.Sort(leaving)
	slices.Sort(pending)
	if len(leaving) > 0 {
		return Eligibility{Nodes: leaving, Leaving: len(pending) == 0, Pending: pending}
	}
	return Eligibility{Nodes: pending, Pending: pending}
}

// Why says, for kubectl eip status and Events, why the IP of the Local
// Services local lives only on e's nodes, or why it lives nowhere.
func (e Eligibility) Why(local []string) string {
	svcs := strings.Join(local, ", ")
	switch {
	case len(e.Nodes) == 0 && len(local) == 1:
		return "no node has a ready endpoint of " + svcs + " (externalTrafficPolicy: Local)"
	case len(e.Nodes) == 0:
		return "no node has a ready endpoint of every one of " + svcs + " (externalTrafficPolicy: Local)"
	case e.Leaving:
		return "only terminating endpoints of " + svcs + " still serve, on " + strings.Join(e.Nodes, ", ")
	case len(e.Pending) > 0:
		return "kube-proxy does not yet deliver to the ready endpoints of " + svcs + " on " + strings.Join(e.Pending, ", ") +
			"; meanwhile serving on " + strings.Join(e.Nodes, ", ")
	}
	return "externalTrafficPolicy: Local; ready endpoints on " + strings.Join(e.Nodes, ", ")
}

// WaitsFor is the nodes the IP's holder waits for: it keeps the IP where
// its endpoints still serve until kube-proxy delivers on one of them.
// None unless holder is one of e's Nodes, not Pending itself, and some
// node is.
func (e Eligibility) WaitsFor(holder string) []string {
	if len(e.Pending) == 0 || !slices.Contains(e.Nodes, holder) || slices.Contains(e.Pending, holder) {
		return nil
	}
	return e.Pending
}
