package policy

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// ExcludeLabel marks nodes that never serve external load balancer IPs.
const ExcludeLabel = "node.kubernetes.io/exclude-from-external-load-balancers"

// NodeEligible says whether a Node may hold IPs under selector, and if not,
// why. A missing, deleting, out-of-service, cordoned or excluded Node may
// not.
func NodeEligible(n *corev1.Node, selector labels.Selector) (bool, string) {
	if gone, why := NodeGone(n); gone {
		return false, why
	}
	if n.Spec.Unschedulable {
		return false, "Node is cordoned"
	}
	if _, ok := n.Labels[ExcludeLabel]; ok {
		return false, "Node is labelled " + ExcludeLabel
	}
	if selector != nil && !selector.Matches(labels.Set(n.Labels)) {
		return false, "Node does not match node-selector " + selector.String()
	}
	return true, ""
}

// NodeGone says whether a Node is out of service, and why: deleted (no
// Node object), being deleted, or tainted node.kubernetes.io/out-of-service,
// which an operator sets on a node shut down without draining (kubelet's
// non-graceful node shutdown). A gone node keeps no IP: the others take
// its IPs at once rather than wait for its heartbeat to expire. A cordoned
// node is not gone: it hands its IPs off (NodeEligible).
func NodeGone(n *corev1.Node) (bool, string) {
	switch {
	case n == nil:
		return true, "no Node object"
	case n.DeletionTimestamp != nil:
		return true, "Node is being deleted"
	}
	for _, t := range n.Spec.Taints {
		if t.Key == corev1.TaintNodeOutOfService {
			return true, "Node is tainted " + corev1.TaintNodeOutOfService
		}
	}
	return false, ""
}
