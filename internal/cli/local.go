package cli

import (
	"slices"
	"strings"

	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/eip-project/eip/internal/endpoints"
	"github.com/eip-project/eip/internal/ipset"
	"github.com/eip-project/eip/internal/listwatch"
)

// slicesByService groups EndpointSlices by their Service, "namespace/name",
// and returns apart the kubernetes Service's: the API server's addresses.
func slicesByService(all []*discoveryv1.EndpointSlice) (map[string][]*discoveryv1.EndpointSlice, []*discoveryv1.EndpointSlice) {
	by := map[string][]*discoveryv1.EndpointSlice{}
	var api []*discoveryv1.EndpointSlice
	for _, es := range all {
		name := es.Labels[discoveryv1.LabelServiceName]
		if name == "" {
			continue
		}
		if es.Namespace == listwatch.APIServiceNamespace && name == listwatch.APIService {
			api = append(api, es)
		}
		by[es.Namespace+"/"+name] = append(by[es.Namespace+"/"+name], es)
	}
	return by, api
}

// placeLocal says in r why the IP of e lives where it does when Services
// with externalTrafficPolicy: Local name it: the nodes with a ready
// endpoint of each, which alone may hold it, or why none may (state
// no-endpoints). bySvc nil: the EndpointSlices could not be read, and r
// stays as it is.
func placeLocal(r *IP, e ipset.Entry, bySvc map[string][]*discoveryv1.EndpointSlice) {
	if len(e.Local) == 0 || bySvc == nil {
		return
	}
	per := make([]map[string]endpoints.Readiness, len(e.Local))
	for i, svc := range e.Local {
		per[i] = endpoints.Nodes(bySvc[svc])
	}
	el := endpoints.Eligible(per)
	why := el.Why(e.Local)
	switch {
	case r.State != StateBound && r.State != StateUnbound && r.State != StateMoving:
		return
	case len(el.Nodes) == 0:
		r.State, r.Reason = StateNoEndpoints, why
		if r.Holder != "" && r.HolderAlive {
			r.Reason += "; " + r.Holder + " unbinds it and releases the lock"
		}
	case r.State == StateBound && !slices.Contains(el.Nodes, r.Holder) && stillServes(per, r.Holder):
		// eipd keeps it there until kube-proxy delivers on one of those
		// (endpoints.Eligibility.WaitsFor), which only it knows.
		r.Reason = joinReasons(r.Reason, "endpoints of "+strings.Join(e.Local, ", ")+" on holder "+r.Holder+" are terminating but still serve; it hands the IP to "+
			strings.Join(el.Nodes, " or ")+" once kube-proxy there delivers to the ready ones (Event WaitingForKubeProxy)")
	case r.State == StateBound && !slices.Contains(el.Nodes, r.Holder):
		r.Reason = joinReasons(r.Reason, "holder "+r.Holder+" has no ready endpoint here; it hands the IP to "+strings.Join(el.Nodes, " or "))
	default:
		r.Reason = joinReasons(r.Reason, why)
	}
}

// stillServes: node has an endpoint that serves, terminating or not, of
// each Service, given as the readiness of its nodes.
func stillServes(per []map[string]endpoints.Readiness, node string) bool {
	for _, nodes := range per {
		if nodes[node] < endpoints.Leaving {
			return false
		}
	}
	return true
}

func joinReasons(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
