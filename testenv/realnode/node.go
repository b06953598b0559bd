package realnode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// NodeConfig describes one real node.
type NodeConfig struct {
	// Name is the Node name the kubelet registers ("node-1").
	Name string
	// Netns is the node's network namespace, under /run/netns.
	Netns string
	// IP is the node's InternalIP, its eth0 address on the LAN.
	IP netip.Addr
	// PodCIDR is this node's pod subnet, ClusterCIDR all nodes' pod subnets.
	PodCIDR, ClusterCIDR netip.Prefix
	// Dir is the node's own directory; it must be empty or new.
	Dir string
	// Kubeconfig is the admin kubeconfig the kubelet and kube-proxy use
	// (the API server authorizes by RBAC only: no node authorizer).
	Kubeconfig string
	Bins       Bins
	// Pause is the sandbox image, imported before the kubelet starts.
	Pause Image
	// Images are imported too, so that pods need no registry.
	Images []Image
	// Registry, when set, is a registry the node pulls from.
	Registry *Registry
	// Shutdown, when set, turns on the kubelet's graceful node shutdown,
	// with the system bus and logind it needs (see Node.Shutdown).
	Shutdown *GracefulShutdown
}

// Registry is a container registry the node's containerd pulls from, over
// HTTPS with a certificate signed by CA, and as the mirror of the
// registries Mirrored names (containerd's hosts.toml).
type Registry struct {
	Host     string // host:port
	CA       string // file of the CA certificate
	Mirrored []string
}

// Image is an OCI archive to import into a node's containerd, known there
// as Ref (the name it was written with) and every name in Tags.
type Image struct {
	Archive string
	Ref     string
	Tags    []string
}

// Node is a running real node. Its methods are safe for concurrent use.
type Node struct {
	cfg     NodeConfig
	started time.Time // when StartNode began
	root    cgroup    // the kubelet's cgroupRoot
	daemon  cgroup    // containerd, its shims, the kubelet, kube-proxy

	mu      sync.Mutex
	procs   []*proc
	standIn *initStandIn // with cfg.Shutdown: while the node runs
}

// StartNode prepares the node's directory and cgroups, starts containerd,
// imports the images, then starts the kubelet and kube-proxy. It does not
// wait for the Node to be Ready. On error the node is stopped again.
func StartNode(ctx context.Context, cfg NodeConfig) (*Node, error) {
	if cfg.Shutdown != nil {
		if err := cfg.Shutdown.validate(); err != nil {
			return nil, fmt.Errorf("start node %s: %w", cfg.Name, err)
		}
	}
	n := &Node{cfg: cfg, started: time.Now().Add(-time.Second), root: cgroup{"/" + cfg.Netns}, daemon: cgroup{"/" + cfg.Netns + "/daemons"}}
	if err := n.prepare(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("start node %s: %w", cfg.Name, err), n.Stop())
	}
	if err := n.Start(ctx); err != nil {
		return nil, errors.Join(err, n.Stop())
	}
	return n, nil
}

func (n *Node) path(elem ...string) string {
	return filepath.Join(append([]string{n.cfg.Dir}, elem...)...)
}

func (n *Node) socket() string { return n.path("containerd.sock") }

// prepare writes the configuration files, creates the cgroups and sets up
// the node's routing: forwarding for pods, a route to every other node's
// pods is added by the caller (RouteTo), and a route for Service IPs so that
// kube-proxy's output DNAT sees their packets.
func (n *Node) prepare(ctx context.Context) error {
	for _, d := range []string{"cni/net.d", "cni/ipam", "pod-logs", "kubelet"} {
		if err := os.MkdirAll(n.path(d), 0o755); err != nil {
			return err
		}
	}
	files := map[string]string{
		"containerd.toml":            n.containerdConfig(),
		"kubelet.yaml":               n.kubeletConfig(),
		"kube-proxy.yaml":            n.kubeProxyConfig(),
		"cni/net.d/10-pods.conflist": n.cniConfig(),
	}
	if n.cfg.Shutdown != nil {
		files["dbus.conf"] = busConfig(n.path("system_bus_socket"))
	}
	if r := n.cfg.Registry; r != nil {
		for _, host := range append([]string{r.Host}, r.Mirrored...) {
			if err := os.MkdirAll(n.path("certs.d", host), 0o755); err != nil {
				return err
			}
			files[filepath.Join("certs.d", host, "hosts.toml")] = fmt.Sprintf(
				"server = %q\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n  ca = %q\n", "https://"+host, "https://"+r.Host, r.CA)
		}
	}
	for name, body := range files {
		if err := os.WriteFile(n.path(name), []byte(body), 0o644); err != nil {
			return err
		}
	}
	if err := n.root.create(); err != nil {
		return err
	}
	if err := n.daemon.create(); err != nil {
		return err
	}
	return n.ipIn(ctx, [][]string{
		{"sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv4.conf.all.send_redirects=0", "net.ipv4.conf.eth0.send_redirects=0"},
	})
}

// ipIn runs commands in the node's network namespace.
func (n *Node) ipIn(ctx context.Context, cmds [][]string) error {
	for _, c := range cmds {
		out, err := exec.CommandContext(ctx, "nsenter", append([]string{"--net=/run/netns/" + n.cfg.Netns, "--"}, c...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s in %s: %w: %s", strings.Join(c, " "), n.cfg.Netns, err, out)
		}
	}
	return nil
}

// Route adds routes in the node's namespace: to another node's pods via
// that node's address, or to a Service range via eth0 (gw invalid).
func (n *Node) Route(ctx context.Context, dst netip.Prefix, gw netip.Addr) error {
	args := []string{"ip", "route", "replace", dst.String()}
	if gw.IsValid() {
		args = append(args, "via", gw.String())
	} else {
		args = append(args, "dev", "eth0")
	}
	return n.ipIn(ctx, [][]string{args})
}

// Start starts containerd, imports the images, and starts the kubelet and
// kube-proxy: at first, and again after Kill (a node coming back). With
// Shutdown, the system bus and logind start first, as on a host they run
// before the kubelet.
func (n *Node) Start(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.procs) > 0 {
		return fmt.Errorf("start node %s: already running", n.cfg.Name)
	}
	var kubeletEnv []string
	if g := n.cfg.Shutdown; g != nil {
		if err := n.startLogin(ctx, *g); err != nil {
			return fmt.Errorf("start node %s: %w", n.cfg.Name, err)
		}
		kubeletEnv = []string{"DBUS_SYSTEM_BUS_ADDRESS=" + n.busAddress()}
	}
	ctrd, err := spawn(n.cfg.Netns, &n.daemon, n.path("containerd.log"), nil,
		filepath.Join(n.cfg.Bins.Containerd, "containerd"), "--config", n.path("containerd.toml"))
	if err != nil {
		return fmt.Errorf("start node %s: %w", n.cfg.Name, err)
	}
	n.procs = append(n.procs, ctrd)
	if err := n.waitContainerd(ctx, ctrd); err != nil {
		return fmt.Errorf("start node %s: %w", n.cfg.Name, err)
	}
	for _, img := range append([]Image{n.cfg.Pause}, n.cfg.Images...) {
		if err := n.importImage(ctx, img); err != nil {
			return fmt.Errorf("start node %s: %w", n.cfg.Name, err)
		}
	}
	kubelet, err := spawn(n.cfg.Netns, &n.daemon, n.path("kubelet.log"), kubeletEnv, filepath.Join(n.cfg.Bins.Kubelet, "kubelet"),
		"--config="+n.path("kubelet.yaml"), "--kubeconfig="+n.cfg.Kubeconfig, "--root-dir="+n.path("kubelet"),
		"--hostname-override="+n.cfg.Name, "--node-ip="+n.cfg.IP.String(), "--v=2")
	if err != nil {
		return fmt.Errorf("start node %s: %w", n.cfg.Name, err)
	}
	n.procs = append(n.procs, kubelet)
	proxy, err := spawn(n.cfg.Netns, &n.daemon, n.path("kube-proxy.log"), nil, filepath.Join(n.cfg.Bins.Kubelet, "kube-proxy"),
		"--config="+n.path("kube-proxy.yaml"), "--v=2")
	if err != nil {
		return fmt.Errorf("start node %s: %w", n.cfg.Name, err)
	}
	n.procs = append(n.procs, proxy)
	return nil
}

func (n *Node) waitContainerd(ctx context.Context, p *proc) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		if _, err := n.ctr(ctx, "version"); err == nil {
			return nil
		}
		if p.exited() {
			return fmt.Errorf("containerd exited; last lines of %s:\n%s", p.log, p.tail())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("containerd not serving: %w; last lines of %s:\n%s", ctx.Err(), p.log, p.tail())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// ctr runs ctr against the node's containerd, in the Kubernetes namespace.
func (n *Node) ctr(ctx context.Context, args ...string) ([]byte, error) {
	args = append([]string{"--address", n.socket(), "--namespace", "k8s.io"}, args...)
	out, err := exec.CommandContext(ctx, filepath.Join(n.cfg.Bins.Containerd, "ctr"), args...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w: %s", err, ee.Stderr)
		}
		return out, fmt.Errorf("ctr %s: %w", strings.Join(args[4:], " "), err)
	}
	return out, nil
}

// ImportImage imports an OCI archive into the node's containerd, so that
// pods using any of its names start without a registry.
func (n *Node) ImportImage(ctx context.Context, img Image) error {
	if err := n.importImage(ctx, img); err != nil {
		return fmt.Errorf("node %s: %w", n.cfg.Name, err)
	}
	return nil
}

func (n *Node) importImage(ctx context.Context, img Image) error {
	if _, err := n.ctr(ctx, "images", "import", "--all-platforms", img.Archive); err != nil {
		return err
	}
	for _, t := range img.Tags {
		if _, err := n.ctr(ctx, "images", "tag", "--force", img.Ref, t); err != nil {
			return err
		}
	}
	return nil
}

// Kill is a node failure: every process of the node (its daemons and its
// pods' containers) is SIGKILLed at once. Start brings it back.
func (n *Node) Kill() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.procs = nil
	n.standIn.close()
	n.standIn = nil
	return n.root.killAll()
}

// Exited reports which of the node's daemons have exited.
func (n *Node) Exited() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var names []string
	for _, p := range n.procs {
		if p.exited() {
			names = append(names, p.name)
		}
	}
	return names
}

// Stop ends the node for good: the kubelet first (gracefully, so it stops
// touching pods), then every process left in the node's cgroups; then it
// unmounts whatever the node mounted under its directory and removes the
// cgroups. Safe on a node that failed half-way through StartNode.
func (n *Node) Stop() error {
	n.mu.Lock()
	procs := n.procs
	n.procs = nil
	n.standIn.close()
	n.standIn = nil
	n.mu.Unlock()
	var errs error
	for _, p := range procs {
		if p.name == "kubelet" {
			errs = errors.Join(errs, p.term(10*time.Second))
		}
	}
	errs = errors.Join(errs, n.root.killAll())
	errs = errors.Join(errs, n.removeShimSockets())
	errs = errors.Join(errs, unmountUnder(n.cfg.Dir))
	errs = errors.Join(errs, n.root.remove())
	if errs != nil {
		return fmt.Errorf("stop node %s: %w", n.cfg.Name, errs)
	}
	return nil
}

// Log is the path of a daemon's log: "containerd", "kubelet" or "kube-proxy".
func (n *Node) Log(daemon string) string { return n.path(daemon + ".log") }

func (n *Node) containerdConfig() string {
	return fmt.Sprintf(`version = 4
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.nri.v1.nri"]

[plugins]
  [plugins.'io.containerd.server.v1.grpc']
    address = %[3]q
  [plugins.'io.containerd.server.v1.ttrpc']
    address = %[4]q
  [plugins.'io.containerd.server.v1.debug']
    address = ""
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = "overlayfs"
    [plugins.'io.containerd.cri.v1.images'.registry]
      config_path = %[10]q
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = %[5]q
  [plugins.'io.containerd.cri.v1.runtime']
    # This root lacks CAP_SYS_RESOURCE: runc cannot give the sandbox the
    # negative oom_score_adj the kubelet asks for.
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = [%[6]q]
      conf_dir = %[7]q
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = "runc"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = %[8]q
          Root = %[9]q
          SystemdCgroup = false
  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
`, n.path("containerd", "root"), n.path("containerd", "state"), n.socket(), n.socket()+".ttrpc",
		n.cfg.Pause.Ref, n.cfg.Bins.CNI, n.path("cni", "net.d"), Runc, n.path("runc"), n.path("certs.d"))
}

func (n *Node) kubeletConfig() string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: %[1]s
cgroupsPerQOS: true
containerRuntimeEndpoint: unix://%[2]s
imageServiceEndpoint: unix://%[2]s
podLogsDir: %[3]s
failSwapOn: false
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%%", imagefs.available: "1%%", nodefs.inodesFree: "1%%"}
resolvConf: /etc/resolv.conf
nodeStatusUpdateFrequency: 2s
syncFrequency: 10s
%[4]s`, n.root.path, n.socket(), n.path("pod-logs"), n.shutdownConfig())
}

func (n *Node) shutdownConfig() string {
	if n.cfg.Shutdown == nil {
		return ""
	}
	return n.cfg.Shutdown.kubeletConfig()
}

func (n *Node) kubeProxyConfig() string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
clientConnection:
  kubeconfig: %[1]s
hostnameOverride: %[2]s
clusterCIDR: %[3]s
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
# Every local address, as in iptables mode by default (nftables mode's
# default is the node's primary addresses): NodePorts then open on
# external IPs too, unless eip's port filter closes them.
nodePortAddresses: ["0.0.0.0/0", "::/0"]
# nf_conntrack_max and the conntrack timeouts are the host's, not the
# namespace's: leave them alone.
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`, n.cfg.Kubeconfig, n.cfg.Name, n.cfg.ClusterCIDR)
}

func (n *Node) cniConfig() string {
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       "pods",
		"plugins": []any{map[string]any{
			"type":        "bridge",
			"bridge":      "cni0",
			"isGateway":   true,
			"hairpinMode": true,
			"ipam": map[string]any{
				"type":    "host-local",
				"ranges":  [][]map[string]string{{{"subnet": n.cfg.PodCIDR.String()}}},
				"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
				"dataDir": n.path("cni", "ipam"),
			},
		}},
	}
	b, _ := json.MarshalIndent(conf, "", "  ") // plain maps of strings: cannot fail
	return string(b)
}

// shimSocketDir is where containerd's shims put their sockets, whatever
// containerd's own state directory: not configurable in containerd v2.4.
const shimSocketDir = "/run/containerd/s"

// removeShimSockets removes the sockets of this node's killed shims (see
// removeDeadShimSockets).
func (n *Node) removeShimSockets() error { return removeDeadShimSockets(n.started) }

// removeDeadShimSockets removes the sockets in shimSocketDir that appeared
// since a time and that nothing listens on any more (a live shim of another
// containerd keeps its own), then the shared directories if nothing else is
// in them.
func removeDeadShimSockets(since time.Time) error {
	entries, err := os.ReadDir(shimSocketDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs error
	for _, e := range entries {
		p := filepath.Join(shimSocketDir, e.Name())
		info, err := e.Info()
		if err != nil || info.Mode().Type() != os.ModeSocket || info.ModTime().Before(since) {
			continue
		}
		if c, err := net.Dial("unix", p); err == nil {
			c.Close()
			continue
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = errors.Join(errs, err)
		}
	}
	for _, d := range []string{shimSocketDir, filepath.Dir(shimSocketDir)} {
		_ = os.Remove(d) // only if empty
	}
	return errs
}

// Remove tears down what the real nodes of a run left when the process that
// ran them died without stopping them: it kills every process in the
// cgroup subtrees named after the run's network namespaces, unmounts
// everything under the run directory and removes the subtrees and dead shim
// sockets.
func Remove(runDir string, netns []string) error {
	var errs error
	for _, ns := range netns {
		g := cgroup{"/" + ns}
		errs = errors.Join(errs, g.killAll())
	}
	if runDir != "" {
		errs = errors.Join(errs, unmountUnder(runDir))
	}
	for _, ns := range netns {
		g := cgroup{"/" + ns}
		errs = errors.Join(errs, g.remove())
	}
	return errors.Join(errs, SweepShimSockets())
}

// SweepShimSockets removes every shim socket that nothing listens on: those
// of shims killed with their node by a run that could not clean up (its
// watchdog does not know which sockets were its own).
func SweepShimSockets() error { return removeDeadShimSockets(time.Time{}) }
