package policy

import (
	"testing"

	"gotest.tools/v3/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

func TestNodeEligible(t *testing.T) {
	now := metav1.Now()
	sel, err := labels.Parse("zone=a")
	assert.NilError(t, err)
	node := func(mod func(*corev1.Node)) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"zone": "a"}}}
		if mod != nil {
			mod(n)
		}
		return n
	}
	for _, tc := range []struct {
		name string
		node *corev1.Node
		sel  labels.Selector
		ok   bool
		why  string
	}{
		{name: "plain", node: node(nil), sel: labels.Everything(), ok: true},
		{name: "selector matches", node: node(nil), sel: sel, ok: true},
		{name: "nil selector means every node", node: node(nil), ok: true},
		{name: "missing", sel: labels.Everything(), why: "no Node object"},
		{name: "deleting", node: node(func(n *corev1.Node) { n.DeletionTimestamp = &now }), sel: labels.Everything(), why: "Node is being deleted"},
		{name: "out of service", node: node(func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: "other", Effect: corev1.TaintEffectNoSchedule}, {Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}}
		}), sel: labels.Everything(), why: "Node is tainted node.kubernetes.io/out-of-service"},
		{name: "another taint", node: node(func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: "node.kubernetes.io/unreachable", Effect: corev1.TaintEffectNoExecute}}
		}), sel: labels.Everything(), ok: true},
		{name: "cordoned", node: node(func(n *corev1.Node) { n.Spec.Unschedulable = true }), sel: labels.Everything(), why: "Node is cordoned"},
		{name: "excluded", node: node(func(n *corev1.Node) { n.Labels[ExcludeLabel] = "" }), sel: labels.Everything(), why: "Node is labelled " + ExcludeLabel},
		{name: "selector does not match", node: node(func(n *corev1.Node) { n.Labels["zone"] = "b" }), sel: sel, why: "Node does not match node-selector zone=a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, why := NodeEligible(tc.node, tc.sel)
			assert.Equal(t, ok, tc.ok)
			assert.Equal(t, why, tc.why)
			// Gone are the missing, deleting and out-of-service ones
			// alone: a cordoned node hands its IPs off by itself.
			gone, _ := NodeGone(tc.node)
			assert.Equal(t, gone, tc.node == nil || tc.node.DeletionTimestamp != nil || tc.name == "out of service")
		})
	}
}
