package testenv

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/eip-project/eip/testenv/confine"
)

const (
	metricsPort = "9402"
	// daemonGrace bounds a graceful daemon stop before it is killed.
	daemonGrace = 30 * time.Second
	// confineTimeout bounds the launcher's few execs before eipd runs.
	confineTimeout = 10 * time.Second
)

// DaemonBin is the eipd binary the cluster's nodes run.
func (c *Cluster) DaemonBin() string { return c.opts.EipdBin }

// DaemonArgs are the flags StartDaemon passes to eipd on a node, before
// the caller's extra arguments (which may override them).
func (c *Cluster) DaemonArgs(node string) []string {
	n, err := c.nodeEndpoint(node)
	if err != nil {
		return nil
	}
	return []string{
		"--kubeconfig=" + c.NodeKubeconfig(node),
		"--node-name=" + node,
		"--namespace=" + Namespace,
		"--config-map=" + ConfigMap,
		// As the DaemonSet runs it: the node's address from the downward
		// API, which the metrics and liveness ports bind.
		"--node-ip=" + n.ipv4.String(),
		"--metrics-addr=:" + metricsPort,
		"-v=2",
	}
}

// DaemonMetricsAddr is where eipd on that node serves metrics, reachable
// from the client namespace (see ClientHTTP).
func (c *Cluster) DaemonMetricsAddr(node string) string {
	n, err := c.nodeEndpoint(node)
	if err != nil {
		return ""
	}
	return net.JoinHostPort(n.ipv4.String(), metricsPort)
}

// DaemonLog is the path of the node's daemon log, which keeps the output of
// every start of the daemon on that node.
func (c *Cluster) DaemonLog(node string) string {
	return filepath.Join(c.dir, "eipd-"+node+".log")
}

// StartDaemon starts eipd in the node's namespace with DaemonArgs and
// extraArgs, with exactly the privileges the DaemonSet in manifests/ grants
// (see package confine), and fails if the process holds any other. It does
// not wait for the daemon to do anything. Daemons of different nodes may be
// started concurrently: each is checked outside the cluster's lock.
func (c *Cluster) StartDaemon(node string, extraArgs ...string) error {
	n, err := c.nodeEndpoint(node)
	if err != nil {
		return err
	}
	if _, err := os.Stat(c.opts.EipdBin); err != nil {
		return fmt.Errorf("start eipd on %s: %w (build it, or set EIPD_BIN)", node, err)
	}
	priv, err := confine.FromDaemonSet(c.opts.ManifestsDir)
	if err != nil {
		return fmt.Errorf("start eipd on %s: %w", node, err)
	}
	p, err := c.startConfined(node, n, priv, append(c.DaemonArgs(node), extraArgs...))
	if err != nil {
		return err
	}
	if err := priv.Verify(p.pid(), c.opts.EipdBin, p.done, confineTimeout); err != nil {
		_ = p.stop(syscall.SIGKILL, daemonGrace)
		return fmt.Errorf("start eipd on %s: %w", node, err)
	}
	return nil
}

// startConfined starts eipd on node under priv and records it, unless the
// cluster is closed or the node's eipd already runs.
func (c *Cluster) startConfined(node string, n *endpoint, priv confine.Privileges, args []string) (*process, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, fmt.Errorf("start eipd on %s: cluster closed", node)
	}
	if p := c.daemons[node]; p != nil && p.running() {
		return nil, fmt.Errorf("start eipd on %s: already running (pid %d)", node, p.pid())
	}
	prog, argv, env := priv.Command(c.opts.EipdBin, args)
	p, err := startProcess(n.ns, "eipd on "+node, c.DaemonLog(node), env, prog, argv...)
	if err != nil {
		return nil, err
	}
	c.daemons[node] = p
	return p, nil
}

// StopDaemon signals eipd on the node and waits for it to exit. After
// SIGTERM a daemon that has not exited within 30 s is killed and an error
// returned. Stopping a daemon that is not running is not an error.
func (c *Cluster) StopDaemon(node string, sig syscall.Signal) error {
	c.mu.Lock()
	p := c.daemons[node]
	c.mu.Unlock()
	if p == nil {
		return nil
	}
	return p.stop(sig, daemonGrace)
}

// RestartDaemon stops eipd on the node with SIGTERM and starts it again.
func (c *Cluster) RestartDaemon(node string, extraArgs ...string) error {
	if err := c.StopDaemon(node, syscall.SIGTERM); err != nil {
		return err
	}
	return c.StartDaemon(node, extraArgs...)
}

// DaemonRunning reports whether eipd runs on the node.
func (c *Cluster) DaemonRunning(node string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.daemons[node]
	return p != nil && p.running()
}

// DaemonPID is the pid of eipd on the node, 0 when it does not run.
func (c *Cluster) DaemonPID(node string) int {
	return c.runningPID(func() *process { return c.daemons[node] })
}

// SignalDaemon sends sig to eipd on the node and returns at once:
// SIGSTOP and SIGCONT make a holder that is alive but does not run, as a
// process starved of CPU. A stopped daemon is still killed by Close.
func (c *Cluster) SignalDaemon(node string, sig syscall.Signal) error {
	pid := c.DaemonPID(node)
	if pid == 0 {
		return fmt.Errorf("signal eipd on %s: it does not run", node)
	}
	if err := syscall.Kill(pid, sig); err != nil {
		return fmt.Errorf("signal eipd on %s: %w", node, err)
	}
	return nil
}
