//go:build tools

// Package k8s pins the control-plane commands that scripts/build-k8s.sh builds.
package k8s

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
