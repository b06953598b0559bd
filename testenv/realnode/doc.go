// Package realnode runs the parts of a real Kubernetes node inside one of
// testenv's node network namespaces: containerd with Debian's runc, a
// kubelet, kube-proxy in nftables mode and the CNI reference plugins (bridge,
// host-local, loopback), plus kube-controller-manager and kube-scheduler for
// the control plane. testenv.Options.RealNodes starts a cluster of them; the
// binaries come from scripts/build-tool.sh (tools kubelet, containerd, cni).
// With GracefulShutdown a node also runs Debian's dbus-daemon and
// systemd-logind, so that its kubelet's graceful node shutdown works
// (Node.Shutdown).
//
// Every process is started with `nsenter --net`, which switches only the
// network namespace: `ip netns exec` would also give it a private mount
// namespace and a fresh /sys, hiding the cgroup tree from the kubelet and
// the kubelet's volume mounts from runc.
//
// Each node owns a directory (sockets, state, logs, pod network namespaces)
// and a cgroup subtree, named after the node namespace, in every cgroup v1
// hierarchy: the kubelet's cgroupRoot, with containerd, its shims, the
// kubelet and kube-proxy in its "daemons" child. Stopping a node kills
// every process in that subtree, unmounts everything under its directory
// and removes the subtree, so nothing of it outlives the test.
package realnode
