//go:build tools

// Package krew pins the krew command that the plugin manifest tests run.
package krew

import _ "sigs.k8s.io/krew/cmd/krew"
