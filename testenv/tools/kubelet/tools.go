//go:build tools

// Package kubelet pins the node and control-plane components of real-node
// clusters (testenv/realnode). Its go.mod repeats testenv/k8s's versions, so
// both builds share the Go build cache; keep the two in step.
package kubelet

import (
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
