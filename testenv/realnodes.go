package testenv

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/eip-project/eip/testenv/realnode"
)

// Pod networking of real-node clusters: node i's pods get 10.244.i.0/24,
// and every node routes the other nodes' subnets to them over the LAN.
var podCIDR = netip.MustParsePrefix("10.244.0.0/16")

func nodePodCIDR(i int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(i), 0}), 24)
}

// resolveRealNodeBins fills in where scripts/build-tool.sh builds the
// real-node binaries.
func (o *Options) resolveRealNodeBins(root string) error {
	for _, t := range []struct {
		dir  *string
		tool string
	}{{&o.RealNodeBins.Kubelet, "kubelet"}, {&o.RealNodeBins.Containerd, "containerd"}, {&o.RealNodeBins.CNI, "cni"}} {
		if *t.dir != "" {
			continue
		}
		dir, err := ToolBinDir(root, t.tool)
		if err != nil {
			return err
		}
		*t.dir = dir
	}
	return nil
}

// startRealNodes starts kube-controller-manager and kube-scheduler, then
// every node's containerd, kubelet and kube-proxy, and waits until every
// Node is Ready.
func (c *Cluster) startRealNodes(ctx context.Context) error {
	if err := realnode.SweepShimSockets(); err != nil {
		c.log.Warn("sweep dead shim sockets", "err", err)
	}
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	imgDir := filepath.Join(c.dir, "images")
	if err := os.MkdirAll(imgDir, 0o755); err != nil {
		return err
	}
	pause, web, err := realnode.BuildImages(ctx, root, imgDir)
	if err != nil {
		return err
	}
	ctrl, err := realnode.StartControllers(realnode.ControllersConfig{
		Netns: c.cp.ns.name, Dir: c.dir, Kubeconfig: c.AdminKubeconfig(),
		CACert: c.pki.caCert, SAKey: c.pki.saKey, Bins: c.opts.RealNodeBins,
	})
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.controllers = ctrl
	c.mu.Unlock()

	svcV4, svcV6 := serviceRanges()
	for i, e := range c.nodes {
		n, err := realnode.StartNode(ctx, realnode.NodeConfig{
			Name: e.name, Netns: e.ns.name, IP: e.ipv4,
			PodCIDR: nodePodCIDR(i + 1), ClusterCIDR: podCIDR,
			Dir: filepath.Join(c.dir, e.name), Kubeconfig: c.AdminKubeconfig(),
			Bins: c.opts.RealNodeBins, Pause: pause, Images: append([]realnode.Image{web}, c.opts.Images...),
			Registry: c.nodeRegistry(), Shutdown: c.opts.GracefulShutdown,
		})
		if err != nil {
			return err
		}
		c.mu.Lock()
		c.realNodes[e.name] = n
		c.mu.Unlock()
		// Service IPs need a route for kube-proxy's DNAT of locally sent
		// packets (the node has no default route); other nodes' pods are
		// reached through those nodes.
		routes := map[netip.Prefix]netip.Addr{svcV4: {}, svcV6: {}}
		for j, peer := range c.nodes {
			if peer != e {
				routes[nodePodCIDR(j+1)] = peer.ipv4
			}
		}
		for dst, gw := range routes {
			if err := n.Route(ctx, dst, gw); err != nil {
				return err
			}
		}
	}
	return c.waitNodesReady(ctx)
}

// nodeRegistry is the registry the real nodes pull from, nil without
// Options.Registry.
func (c *Cluster) nodeRegistry() *realnode.Registry {
	if !c.opts.Registry {
		return nil
	}
	return &realnode.Registry{Host: c.Registry(), CA: c.CACert(), Mirrored: c.opts.Mirrored}
}

func serviceRanges() (v4, v6 netip.Prefix) {
	var ps []netip.Prefix
	for _, s := range strings.Split(serviceCIDR, ",") {
		ps = append(ps, netip.MustParsePrefix(s))
	}
	return ps[0], ps[1]
}

func (c *Cluster) waitNodesReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.StartTimeout)
	defer cancel()
	for {
		list, err := c.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		ready := 0
		if err == nil {
			for _, n := range list.Items {
				if nodeReady(&n) {
					ready++
				}
			}
		}
		if ready == len(c.nodes) {
			return nil
		}
		for name, n := range c.realNodeMap() {
			if exited := n.Exited(); len(exited) > 0 {
				return fmt.Errorf("node %s: %v exited; see %s", name, exited, filepath.Dir(n.Log("kubelet")))
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %d Ready nodes (have %d, last error %v): %w", len(c.nodes), ready, err, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func nodeReady(n *corev1.Node) bool {
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

func (c *Cluster) realNodeMap() map[string]*realnode.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := make(map[string]*realnode.Node, len(c.realNodes))
	for k, v := range c.realNodes {
		m[k] = v
	}
	return m
}

// RealNode is the real node of that name, in a cluster started with
// RealNodes.
func (c *Cluster) RealNode(name string) (*realnode.Node, error) {
	n := c.realNodeMap()[name]
	if n == nil {
		return nil, fmt.Errorf("no real node %q in cluster %s", name, c.id)
	}
	return n, nil
}

// ImportImage imports an OCI archive into every real node's containerd.
func (c *Cluster) ImportImage(ctx context.Context, img realnode.Image) error {
	for _, n := range c.realNodeMap() {
		if err := n.ImportImage(ctx, img); err != nil {
			return err
		}
	}
	return nil
}

// FailNode is a node failure: every process of the node is killed at once
// (containerd, the kubelet, kube-proxy, every pod's containers) and its
// link is cut. ReviveNode brings it back.
func (c *Cluster) FailNode(ctx context.Context, name string) error {
	n, err := c.RealNode(name)
	if err != nil {
		return err
	}
	return errors.Join(n.Kill(), c.CutLink(ctx, name))
}

// ShutdownNode shuts a real node down gracefully, as `systemctl poweroff`
// on it would, in a cluster started with Options.GracefulShutdown: logind
// announces the shutdown, the kubelet stops the node's pods, then logind
// asks the init system to power off, and the node goes down as in
// FailNode: every process killed, its link cut. ReviveNode boots it again.
func (c *Cluster) ShutdownNode(ctx context.Context, name string) error {
	n, err := c.RealNode(name)
	if err != nil {
		return err
	}
	if err := n.Shutdown(ctx); err != nil {
		return err
	}
	return c.FailNode(ctx, name)
}

// ReviveNode restores the link of a failed node and starts its containerd,
// kubelet and kube-proxy again; the kubelet then restarts its pods.
func (c *Cluster) ReviveNode(ctx context.Context, name string) error {
	n, err := c.RealNode(name)
	if err != nil {
		return err
	}
	if err := c.RestoreLink(ctx, name); err != nil {
		return err
	}
	return n.Start(ctx)
}

// stopRealNodes stops every node, then the controllers.
func (c *Cluster) stopRealNodes() error {
	c.mu.Lock()
	nodes, ctrl := c.realNodes, c.controllers
	c.realNodes, c.controllers = map[string]*realnode.Node{}, nil
	c.mu.Unlock()
	var errs error
	for _, n := range nodes {
		errs = errors.Join(errs, n.Stop())
	}
	if ctrl != nil {
		errs = errors.Join(errs, ctrl.Stop())
	}
	return errs
}
