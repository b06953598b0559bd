package realnode

import (
	"fmt"
	"os"
	"path/filepath"
)

// Runc is Debian's runc (package runc), which containerd's shim runs.
const Runc = "/usr/sbin/runc"

// Bins are the directories that scripts/build-tool.sh builds into.
type Bins struct {
	// Kubelet holds kubelet, kube-controller-manager, kube-scheduler and
	// kube-proxy (tool "kubelet").
	Kubelet string
	// Containerd holds containerd, ctr and containerd-shim-runc-v2 (tool
	// "containerd").
	Containerd string
	// CNI holds the plugins bridge, host-local and loopback (tool "cni").
	CNI string
}

// Check says which binary is missing, and how to build it.
func (b Bins) Check() error {
	for dir, tool := range map[string]string{b.Kubelet: "kubelet", b.Containerd: "containerd", b.CNI: "cni"} {
		for _, name := range toolBinaries[tool] {
			if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
				return fmt.Errorf("real nodes: %w (run scripts/build-tool.sh %s)", err, tool)
			}
		}
	}
	if _, err := os.Stat(Runc); err != nil {
		return fmt.Errorf("real nodes: %w (apt-get install runc)", err)
	}
	return nil
}

var toolBinaries = map[string][]string{
	"kubelet":    {"kubelet", "kube-controller-manager", "kube-scheduler", "kube-proxy"},
	"containerd": {"containerd", "ctr", "containerd-shim-runc-v2"},
	"cni":        {"bridge", "host-local", "loopback"},
}
