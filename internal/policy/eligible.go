package policy

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// ExcludeLabel marks nodes that never serve external load balancer IPs.
const ExcludeLabel = "node.kubernetes.io/exclude-from-external-load-balancers"

// NodeEligible says whether a Node may hold IPs under selector, and if not,
// why. A missing, deleting, cordoned or excluded Node may not.
func NodeEligible(n *corev1.Node, selector labels.Selector) (bool, string) {
	switch {
	case n == nil:
		return false, "no Node object"
	case n.DeletionTimestamp != nil:
		return false, "Node is being deleted"
	case n.Spec.Unschedulable:
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
