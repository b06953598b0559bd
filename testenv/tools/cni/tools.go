//go:build tools

// Package cni pins the CNI reference plugins that give pods of real-node
// clusters (testenv/realnode) their network: bridge, host-local and loopback.
package cni

import (
	_ "github.com/containernetworking/plugins/plugins/ipam/host-local"
	_ "github.com/containernetworking/plugins/plugins/main/bridge"
	_ "github.com/containernetworking/plugins/plugins/main/loopback"
)
