package testenv

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// registerNode creates the Node object of a node namespace, Ready and with
// the namespace's addresses, as a kubelet would report them.
func (c *Cluster) registerNode(ctx context.Context, n *endpoint) error {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:   n.name,
		Labels: map[string]string{"kubernetes.io/hostname": n.name, "kubernetes.io/os": "linux"},
	}}
	created, err := c.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create node %s: %w", n.name, err)
	}
	now := metav1.Now()
	created.Status = corev1.NodeStatus{
		Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: n.ipv4.String()},
			{Type: corev1.NodeInternalIP, Address: n.ipv6.String()},
			{Type: corev1.NodeHostName, Address: n.name},
		},
		Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			Message: "node namespace of eip testenv", LastHeartbeatTime: now, LastTransitionTime: now,
		}},
	}
	if _, err := c.client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("set status of node %s: %w", n.name, err)
	}
	return nil
}

// RegisterNode creates the Node object of node namespace name again, as
// its kubelet does when it starts and finds none: after a test deleted it.
func (c *Cluster) RegisterNode(ctx context.Context, name string) error {
	n, err := c.endpoint(name)
	if err != nil {
		return err
	}
	return c.registerNode(ctx, n)
}
