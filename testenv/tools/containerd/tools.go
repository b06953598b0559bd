//go:build tools

// Package containerd pins containerd, ctr and the runc shim for the nodes of
// real-node clusters (testenv/realnode); runc itself comes from Debian.
package containerd

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
