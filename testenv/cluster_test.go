package testenv

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// shared is the one cluster the package's tests use, started by TestMain;
// skip says why there is none.
var shared struct {
	c    *Cluster
	skip string
}

// fakeDaemon stands in for eipd to test starting and stopping daemons: it
// prints its arguments, its privileges and whether it may write /proc/sys,
// and says goodbye on SIGTERM.
const fakeDaemon = `#!/bin/sh
trap 'echo "fake eipd: terminated"; exit 0' TERM
echo "fake eipd $*"
grep -E '^(CapEff|CapBnd|NoNewPrivs):' /proc/$$/status
if (echo 0 >/proc/sys/net/ipv4/conf/lo/forwarding) 2>/dev/null; then echo "fake eipd: wrote /proc/sys"; else echo "fake eipd: cannot write /proc/sys"; fi
while :; do sleep 0.05; done
`

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	if os.Getenv(ownerHelperEnv) == "1" {
		return ownerHelper()
	}
	if testing.Short() {
		shared.skip = "cluster tests skipped with -short"
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "eip-testenv-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	fake := filepath.Join(dir, "fake-eipd")
	if err := os.WriteFile(fake, []byte(fakeDaemon), 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	opts := Options{Nodes: 3, EipdBin: fake}
	if err := Prerequisites(opts); err != nil {
		if code := Unavailable("testenv", err); code != 0 {
			return code
		}
		shared.skip = err.Error() // the tests without a cluster still run
		return m.Run()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	began := time.Now()
	c, err := Start(ctx, opts)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("cluster %s started in %s, run dir %s\n", c.ID(), time.Since(began).Round(time.Millisecond), c.Dir())
	stop := c.CloseOnInterrupt()
	defer stop()
	shared.c = c
	code := m.Run()
	if code != 0 {
		c.Keep()
	}
	if err := c.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	return code
}

// ownerHelperEnv makes the test binary start a cluster, print its id, run
// dir and process ids, and wait to be killed (TestKilledOwnerLeavesNothing).
const ownerHelperEnv = "EIP_TESTENV_OWNER_HELPER"

func ownerHelper() int {
	c, err := Start(context.Background(), Options{Nodes: 1})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(c.ID(), c.Dir(), c.etcd.pid(), c.apiserver.pid())
	select {}
}

func cluster(t *testing.T) *Cluster {
	t.Helper()
	if shared.c == nil {
		t.Skip(shared.skip)
	}
	return shared.c
}

func TestAPIServerAndKubectl(t *testing.T) {
	c := cluster(t)
	ctx := t.Context()
	v, err := c.Client().Discovery().ServerVersion()
	assert.NilError(t, err)
	assert.Equal(t, v.GitVersion, K8sVersion)

	out, err := c.Kubectl(ctx, "get", "nodes", "-o", "name")
	assert.NilError(t, err)
	assert.Equal(t, string(out), "node/node-1\nnode/node-2\nnode/node-3\n")

	out, err = c.Kubectl(ctx, "version", "--client", "-o", "json")
	assert.NilError(t, err)
	assert.Check(t, is.Contains(string(out), `"gitVersion": "`+K8sVersion+`"`))

	node, err := c.Client().CoreV1().Nodes().Get(ctx, "node-2", metav1.GetOptions{})
	assert.NilError(t, err)
	assert.Equal(t, node.Status.Addresses[0].Address, "198.18.0.12")
}

func TestServiceAccountRBAC(t *testing.T) {
	c := cluster(t)
	ctx := t.Context()
	cfg, err := c.ServiceAccountConfig(ctx)
	assert.NilError(t, err)
	sa, err := kubernetes.NewForConfig(cfg)
	assert.NilError(t, err)

	_, err = sa.CoordinationV1().Leases(Namespace).List(ctx, metav1.ListOptions{})
	assert.NilError(t, err)
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "eip-rbac-check"}}
	_, err = sa.CoordinationV1().Leases(Namespace).Create(ctx, lease, metav1.CreateOptions{})
	assert.NilError(t, err)
	assert.NilError(t, sa.CoordinationV1().Leases(Namespace).Delete(ctx, lease.Name, metav1.DeleteOptions{}))
	_, err = sa.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	assert.NilError(t, err)
	_, err = sa.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	assert.NilError(t, err)

	_, err = sa.CoreV1().Secrets(Namespace).List(ctx, metav1.ListOptions{})
	assert.Assert(t, apierrors.IsForbidden(err), "listing secrets: %v", err)
	_, err = sa.CoordinationV1().Leases("default").List(ctx, metav1.ListOptions{})
	assert.Assert(t, apierrors.IsForbidden(err), "listing leases outside eip-system: %v", err)

	// The node kubeconfig works from inside the node namespace, as eipd uses it.
	out, err := c.Exec(ctx, "node-1", c.KubectlPath(), "--kubeconfig="+c.NodeKubeconfig("node-1"), "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
	assert.NilError(t, err)
	assert.Equal(t, string(out), "system:serviceaccount:eip-system:eip")
}

// bind adds an address to a node's eth0 for the duration of the test, as
// eipd would.
func bind(t *testing.T, c *Cluster, node string, p netip.Prefix) {
	t.Helper()
	args := []string{"ip", "addr", "add", p.String(), "dev", "eth0"}
	if p.Addr().Is6() {
		args = append(args, "nodad")
	}
	_, err := c.Exec(t.Context(), node, args...)
	assert.NilError(t, err)
	t.Cleanup(func() { _, _ = c.Exec(context.Background(), node, "ip", "addr", "del", p.String(), "dev", "eth0") })
}

func TestProbeSeesWhoAnswers(t *testing.T) {
	c := cluster(t)
	ctx := t.Context()
	ip := ServiceIP(1)
	bind(t, c, "node-1", netip.PrefixFrom(ip, 16))
	mac1, _ := c.NodeMAC("node-1")
	mac2, _ := c.NodeMAC("node-2")

	has, err := c.NodeHasAddr("node-1", ip)
	assert.NilError(t, err)
	assert.Assert(t, has)
	who, err := c.WhoAnswers(ip)
	assert.NilError(t, err)
	assert.DeepEqual(t, who, []net.HardwareAddr{mac1})

	p, err := c.Probe(ip, 0)
	assert.NilError(t, err)
	Eventually(t, 5*time.Second, func() (bool, string) {
		r := p.Result()
		return len(r.Replies) >= 5, r.String()
	})

	// Move the address to node-2; the client learns the new MAC once its
	// neighbour entry is gone.
	_, err = c.Exec(ctx, "node-1", "ip", "addr", "del", netip.PrefixFrom(ip, 16).String(), "dev", "eth0")
	assert.NilError(t, err)
	bind(t, c, "node-2", netip.PrefixFrom(ip, 16))
	_, err = c.Exec(ctx, Client, "ip", "neigh", "del", ip.String(), "dev", "eth0")
	assert.NilError(t, err)
	Eventually(t, 5*time.Second, func() (bool, string) {
		r := p.Result()
		return r.LastMAC().String() == mac2.String(), r.String()
	})
	neigh, err := c.ClientNeigh()
	assert.NilError(t, err)
	assert.Assert(t, hasNeighbor(neigh, ip, mac2), "%v", neigh)

	r := p.Stop()
	t.Log(r)
	assert.DeepEqual(t, r.MACs(), []net.HardwareAddr{mac1, mac2})
	assert.Equal(t, len(r.Overlaps()), 0)
	assert.Assert(t, r.LongestGap().Duration() > 0)

	// A cut link silences node-2, and restoring it brings the replies back.
	assert.NilError(t, c.CutLink(ctx, "node-2"))
	p, err = c.Probe(ip, 0)
	assert.NilError(t, err)
	defer p.Stop()
	Eventually(t, 2*time.Second, func() (bool, string) {
		r := p.Result()
		return r.Sent >= 30, r.String()
	})
	assert.Equal(t, len(p.Result().Replies), 0, "replies over a cut link")
	assert.NilError(t, c.RestoreLink(ctx, "node-2"))
	Eventually(t, 5*time.Second, func() (bool, string) {
		r := p.Result()
		return len(r.Replies) > 0 && r.LastMAC().String() == mac2.String(), r.String()
	})
}

func hasNeighbor(neigh []Neighbor, ip netip.Addr, mac net.HardwareAddr) bool {
	for _, n := range neigh {
		if n.IP == ip && n.MAC.String() == mac.String() {
			return true
		}
	}
	return false
}

func TestProbeIPv6(t *testing.T) {
	c := cluster(t)
	ip := ServiceIPv6(1)
	bind(t, c, "node-3", netip.PrefixFrom(ip, 64))
	mac3, _ := c.NodeMAC("node-3")
	// On a loaded machine a solicitation can go unanswered within the
	// window, as on a real LAN: asked again until node-3 answers, alone.
	Eventually(t, 10*time.Second, func() (bool, string) {
		who, err := c.WhoAnswers(ip)
		if err != nil {
			return false, err.Error()
		}
		return len(who) == 1 && who[0].String() == mac3.String(), fmt.Sprint(who)
	})

	p, err := c.Probe(ip, 0)
	assert.NilError(t, err)
	Eventually(t, 5*time.Second, func() (bool, string) {
		r := p.Result()
		return len(r.Replies) >= 5, r.String()
	})
	r := p.Stop()
	assert.DeepEqual(t, r.MACs(), []net.HardwareAddr{mac3})
}

func TestBlockAPI(t *testing.T) {
	c := cluster(t)
	ctx := t.Context()
	getLeases := func(node string) error {
		_, err := c.Exec(ctx, node, c.KubectlPath(), "--kubeconfig="+c.NodeKubeconfig(node), "--request-timeout=1s", "get", "leases")
		return err
	}
	assert.NilError(t, c.BlockAPI(ctx, "node-1"))
	assert.Assert(t, getLeases("node-1") != nil, "API reachable from a blocked node")
	assert.NilError(t, getLeases("node-2"))
	// The LAN still works for the blocked node.
	_, err := c.Exec(ctx, Client, "ping", "-c", "1", "-W", "1", "198.18.0.11")
	assert.NilError(t, err)
	assert.NilError(t, c.UnblockAPI(ctx, "node-1"))
	assert.NilError(t, getLeases("node-1"))
}

func TestLatency(t *testing.T) {
	c := cluster(t)
	ctx := t.Context()
	node, _ := c.Node("node-1")
	const delay = 30 * time.Millisecond
	assert.NilError(t, c.AddLatency(ctx, "node-1", delay))
	t.Cleanup(func() { _ = c.AddLatency(context.Background(), "node-1", 0) })
	p, err := c.Probe(node.IPv4, 0)
	assert.NilError(t, err)
	Eventually(t, 5*time.Second, func() (bool, string) {
		r := p.Result()
		return len(r.Replies) >= 5, r.String()
	})
	for _, rep := range p.Stop().Replies {
		assert.Assert(t, rep.RTT >= delay, "RTT %s with %s of latency", rep.RTT, delay)
	}

	// Large TCP responses (offloaded segments) pass the relay too.
	assert.NilError(t, c.AddLatency(ctx, ControlPlane, 5*time.Millisecond))
	t.Cleanup(func() { _ = c.AddLatency(context.Background(), ControlPlane, 0) })
	_, err = c.Kubectl(ctx, "get", "--raw", "/openapi/v2")
	assert.NilError(t, err)

	assert.NilError(t, c.AddLatency(ctx, "node-1", 0))
	p, err = c.Probe(node.IPv4, 0)
	assert.NilError(t, err)
	Eventually(t, 5*time.Second, func() (bool, string) {
		r := p.Result()
		return len(r.Replies) >= 5, r.String()
	})
	// Most replies, not all: a loaded machine may delay a few by itself.
	r := p.Stop()
	var fast int
	for _, rep := range r.Replies {
		if rep.RTT < delay {
			fast++
		}
	}
	assert.Assert(t, fast > len(r.Replies)/2, "%d of %d replies faster than %s after removing the latency", fast, len(r.Replies), delay)
}

func TestDaemonLifecycle(t *testing.T) {
	c := cluster(t)
	logHas := func(s string) func() (bool, string) {
		return func() (bool, string) {
			b, _ := os.ReadFile(c.DaemonLog("node-1"))
			return strings.Contains(string(b), s), string(b)
		}
	}
	assert.NilError(t, c.StartDaemon("node-1", "--extra"))
	assert.Assert(t, c.DaemonRunning("node-1"))
	assert.ErrorContains(t, c.StartDaemon("node-1"), "already running")
	// The fake's own output, not the log's header line: it runs.
	Eventually(t, 5*time.Second, logHas("fake eipd --kubeconfig="+c.NodeKubeconfig("node-1")+" --node-name=node-1"))
	Eventually(t, 5*time.Second, logHas(" --extra\n"))

	assert.NilError(t, c.StopDaemon("node-1", syscall.SIGTERM))
	assert.Assert(t, !c.DaemonRunning("node-1"))
	Eventually(t, time.Second, logHas("fake eipd: terminated"))

	assert.NilError(t, c.RestartDaemon("node-1"))
	assert.Assert(t, c.DaemonPID("node-1") != 0)
	Eventually(t, 5*time.Second, func() (bool, string) {
		b, _ := os.ReadFile(c.DaemonLog("node-1"))
		return strings.Count(string(b), "fake eipd --kubeconfig") == 2, string(b)
	})
	assert.NilError(t, c.StopDaemon("node-1", syscall.SIGKILL))
	assert.Assert(t, !c.DaemonRunning("node-1"))
	assert.NilError(t, c.StopDaemon("node-1", syscall.SIGTERM), "stopping a stopped daemon")
}

// TestDaemonPrivileges checks, from inside the started process, that it
// holds only the DaemonSet's NET_ADMIN and NET_RAW, cannot gain more and
// cannot write /proc/sys, as in a pod.
func TestDaemonPrivileges(t *testing.T) {
	c := cluster(t)
	assert.NilError(t, c.StartDaemon("node-2"))
	t.Cleanup(func() { _ = c.StopDaemon("node-2", syscall.SIGKILL) })
	Eventually(t, 5*time.Second, func() (bool, string) {
		b, _ := os.ReadFile(c.DaemonLog("node-2"))
		return strings.Contains(string(b), "fake eipd: "), string(b)
	})
	b, err := os.ReadFile(c.DaemonLog("node-2"))
	assert.NilError(t, err)
	log := string(b)
	for _, want := range []string{"CapEff:\t0000000000003000\n", "CapBnd:\t0000000000003000\n", "NoNewPrivs:\t1\n", "fake eipd: cannot write /proc/sys\n"} {
		assert.Check(t, is.Contains(log, want))
	}
}

func TestControlPlaneRestart(t *testing.T) {
	c := cluster(t)
	ctx := t.Context()
	ready := func() error {
		_, err := c.Client().Discovery().RESTClient().Get().AbsPath("/readyz").Timeout(time.Second).DoRaw(ctx)
		return err
	}
	began := time.Now()
	assert.NilError(t, c.StopEtcd(syscall.SIGKILL))
	t.Logf("etcd stopped in %s", time.Since(began))
	Eventually(t, 30*time.Second, func() (bool, string) {
		err := ready()
		return err != nil, "API server still ready without etcd"
	})
	assert.NilError(t, c.StartEtcd(ctx))
	Eventually(t, 30*time.Second, func() (bool, string) {
		err := ready()
		return err == nil, fmt.Sprintf("readyz: %v", err)
	})

	t.Logf("etcd back in %s", time.Since(began))

	began = time.Now()
	assert.NilError(t, c.StopAPIServer(syscall.SIGTERM))
	t.Logf("kube-apiserver stopped in %s", time.Since(began))
	assert.Assert(t, ready() != nil)
	assert.NilError(t, c.StartAPIServer(ctx))
	t.Logf("kube-apiserver back in %s", time.Since(began))
	assert.NilError(t, ready())
	_, err := c.Client().CoreV1().Nodes().Get(ctx, "node-1", metav1.GetOptions{})
	assert.NilError(t, err)
}

// TestCloseRemovesEverything runs a cluster of its own, since it ends it.
func TestCloseRemovesEverything(t *testing.T) {
	if shared.c == nil {
		t.Skip(shared.skip)
	}
	ctx := t.Context()
	c, err := Start(ctx, Options{Nodes: 1})
	assert.NilError(t, err)
	list := func() string {
		out, err := output(ctx, nil, "ip", "netns", "list")
		assert.NilError(t, err)
		var ours []string
		for _, l := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(l, "eip-"+c.ID()+"-") {
				ours = append(ours, strings.Fields(l)[0])
			}
		}
		sort.Strings(ours)
		return strings.Join(ours, " ")
	}
	assert.Equal(t, list(), fmt.Sprintf("eip-%[1]s-client eip-%[1]s-cp eip-%[1]s-lan eip-%[1]s-n1", c.ID()))
	dir := c.Dir()
	assert.NilError(t, c.Close())
	assert.NilError(t, c.Close(), "second Close")
	assert.Equal(t, list(), "")
	for _, path := range []string{dir, c.StatePath()} {
		_, err = os.Stat(path)
		assert.Assert(t, os.IsNotExist(err), "%s: %v", path, err)
	}
}

// TestKilledOwnerLeavesNothing kills a process that owns a cluster the way a
// test timeout does, and expects the watchdog to remove everything.
func TestKilledOwnerLeavesNothing(t *testing.T) {
	if shared.c == nil {
		t.Skip(shared.skip)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), ownerHelperEnv+"=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	assert.NilError(t, err)
	assert.NilError(t, cmd.Start())
	var id, dir string
	var etcdPID, apiPID int
	_, err = fmt.Fscan(out, &id, &dir, &etcdPID, &apiPID)
	assert.NilError(t, err)
	assert.NilError(t, cmd.Process.Kill())
	_ = cmd.Wait()

	Eventually(t, 10*time.Second, func() (bool, string) {
		var left []string
		for _, pid := range []int{etcdPID, apiPID} {
			if syscall.Kill(pid, 0) == nil {
				left = append(left, fmt.Sprintf("pid %d", pid))
			}
		}
		netns, _ := filepath.Glob("/run/netns/eip-" + id + "-*")
		left = append(left, netns...)
		for _, path := range []string{dir, statePath(id)} {
			if _, err := os.Stat(path); err == nil {
				left = append(left, path)
			}
		}
		return len(left) == 0, fmt.Sprintf("left behind: %v", left)
	})
}
