package testenv

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// blockTable is the nftables table BlockAPI installs in a node namespace.
const blockTable = "eip_testenv_block"

// CutLink takes the node's port on the LAN bridge down, so the node's eth0
// loses carrier: the node is partitioned from everything, API server
// included, and knows it.
func (c *Cluster) CutLink(ctx context.Context, node string) error {
	return c.setPort(ctx, node, "down")
}

// RestoreLink undoes CutLink.
func (c *Cluster) RestoreLink(ctx context.Context, node string) error {
	return c.setPort(ctx, node, "up")
}

func (c *Cluster) setPort(ctx context.Context, node, state string) error {
	n, err := c.nodeEndpoint(node)
	if err != nil {
		return err
	}
	if err := run(ctx, nil, "ip", "-n", c.lan.name, "link", "set", n.port, state); err != nil {
		return fmt.Errorf("set link of %s %s: %w", node, state, err)
	}
	return nil
}

// BlockAPI drops, inside the node's namespace, every packet to and from the
// API server's port: the node loses the API server while the LAN still
// works, and its open connections hang rather than reset.
func (c *Cluster) BlockAPI(ctx context.Context, node string) error {
	n, err := c.nodeEndpoint(node)
	if err != nil {
		return err
	}
	port := strconv.Itoa(apiPort)
	rules := fmt.Sprintf(`table inet %[1]s {
	chain output {
		type filter hook output priority 0; policy accept;
		ip daddr %[2]s tcp dport %[4]s drop
		ip6 daddr %[3]s tcp dport %[4]s drop
	}
	chain input {
		type filter hook input priority 0; policy accept;
		ip saddr %[2]s tcp sport %[4]s drop
		ip6 saddr %[3]s tcp sport %[4]s drop
	}
}
`, blockTable, c.cp.ipv4, c.cp.ipv6, port)
	if err := run(ctx, []byte(rules), "ip", "netns", "exec", n.ns.name, "nft", "-f", "-"); err != nil {
		return fmt.Errorf("block API for %s: %w", node, err)
	}
	return nil
}

// UnblockAPI undoes BlockAPI.
func (c *Cluster) UnblockAPI(ctx context.Context, node string) error {
	n, err := c.nodeEndpoint(node)
	if err != nil {
		return err
	}
	if err := run(ctx, nil, "ip", "netns", "exec", n.ns.name, "nft", "delete", "table", "inet", blockTable); err != nil {
		return fmt.Errorf("unblock API for %s: %w", node, err)
	}
	return nil
}

// Command returns a command that runs inside the namespace of name
// (ControlPlane, Client or a node name), e.g. `ip addr del …` on a node.
func (c *Cluster) Command(ctx context.Context, name string, args ...string) (*exec.Cmd, error) {
	e, err := c.endpoint(name)
	if err != nil {
		return nil, err
	}
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", e.ns.name}, args...)...), nil
}

// Exec runs a command inside the namespace of name and returns its standard
// output; the error carries its standard error.
func (c *Cluster) Exec(ctx context.Context, name string, args ...string) ([]byte, error) {
	e, err := c.endpoint(name)
	if err != nil {
		return nil, err
	}
	return output(ctx, nil, "ip", append([]string{"netns", "exec", e.ns.name}, args...)...)
}

// Kubectl runs the built kubectl in the client namespace as cluster admin.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) ([]byte, error) {
	return c.Exec(ctx, Client, append([]string{c.KubectlPath(), "--kubeconfig=" + c.AdminKubeconfig()}, args...)...)
}

// KubectlPath is the kubectl built with the control plane.
func (c *Cluster) KubectlPath() string { return filepath.Join(c.opts.K8sBinDir, "kubectl") }

// udpTable is the nftables table BlockUDP installs in a node namespace.
const udpTable = "eip_testenv_udp"

// BlockUDP drops, inside the node's namespace, the UDP datagrams to port
// that the node sends (out) and those it receives (in); with peers, only
// those to and from these nodes. Everything else, the API server and ARP
// included, still works: a firewall rule or a lossy queue for one kind of
// traffic.
func (c *Cluster) BlockUDP(ctx context.Context, node string, port uint16, out, in bool, peers ...string) error {
	n, err := c.nodeEndpoint(node)
	if err != nil {
		return err
	}
	var match, from string
	if len(peers) > 0 {
		var v4 []string
		for _, p := range peers {
			pe, err := c.nodeEndpoint(p)
			if err != nil {
				return err
			}
			v4 = append(v4, pe.ipv4.String())
		}
		match = "ip daddr { " + strings.Join(v4, ", ") + " } "
		from = "ip saddr { " + strings.Join(v4, ", ") + " } "
	}
	var rules strings.Builder
	fmt.Fprintf(&rules, "table inet %s {\n", udpTable)
	if out {
		fmt.Fprintf(&rules, "\tchain output {\n\t\ttype filter hook output priority 0; policy accept;\n\t\t%sudp dport %d drop\n\t}\n", match, port)
	}
	if in {
		fmt.Fprintf(&rules, "\tchain input {\n\t\ttype filter hook input priority 0; policy accept;\n\t\t%sudp dport %d drop\n\t}\n", from, port)
	}
	rules.WriteString("}\n")
	if err := run(ctx, []byte(rules.String()), "ip", "netns", "exec", n.ns.name, "nft", "-f", "-"); err != nil {
		return fmt.Errorf("block UDP port %d for %s: %w", port, node, err)
	}
	return nil
}

// UnblockUDP undoes BlockUDP.
func (c *Cluster) UnblockUDP(ctx context.Context, node string) error {
	n, err := c.nodeEndpoint(node)
	if err != nil {
		return err
	}
	if err := run(ctx, nil, "ip", "netns", "exec", n.ns.name, "nft", "delete", "table", "inet", udpTable); err != nil {
		return fmt.Errorf("unblock UDP for %s: %w", node, err)
	}
	return nil
}
