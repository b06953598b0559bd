package realnodes

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/eip-project/eip/internal/lease"
	"github.com/eip-project/eip/testenv"
	"github.com/eip-project/eip/testenv/workload"
)

// The tests run in this order and share the installation; each leaves eip
// installed and every IP served, except TestUninstall, which runs last.

// eipd runs as the manifests say: in the node's network namespace, with
// NET_ADMIN and NET_RAW only, no new privileges, a seccomp filter, a
// read-only /proc/sys, and the in-cluster configuration of its
// ServiceAccount.
func TestInstalledAsManifestsSay(t *testing.T) {
	installed(t)
	const netAdminRaw = 1<<12 | 1<<13 // CAP_NET_ADMIN, CAP_NET_RAW
	for _, n := range cluster.Nodes() {
		pid := eipdProcess(t, n)
		status := procFields(t, pid, "status")
		for _, f := range []string{"CapEff", "CapPrm", "CapBnd"} {
			if got := status[f]; got != fmt.Sprintf("%016x", netAdminRaw) {
				t.Errorf("%s: eipd %s %s, want NET_ADMIN and NET_RAW only (%016x)", n.Name, f, got, netAdminRaw)
			}
		}
		if status["NoNewPrivs"] != "1" || status["Seccomp"] != "2" {
			t.Errorf("%s: eipd NoNewPrivs %s, Seccomp %s; want 1 and 2", n.Name, status["NoNewPrivs"], status["Seccomp"])
		}
		env := procEnv(t, pid)
		if env["KUBERNETES_SERVICE_HOST"] == "" || env["NODE_NAME"] != n.Name {
			t.Errorf("%s: eipd environment lacks the in-cluster config or NODE_NAME: %v", n.Name, env)
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", fmt.Sprint(pid), "cmdline"))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(cmdline, []byte("kubeconfig")) {
			t.Errorf("%s: eipd was given a kubeconfig: %q", n.Name, cmdline)
		}
		if !procSysReadOnly(t, pid) {
			t.Errorf("%s: /proc/sys is writable for eipd", n.Name)
		}
		// The heartbeat proves the in-cluster config reached the API server
		// (through kube-proxy's Service rules for 10.96.0.1).
		_, err = cluster.Client().CoordinationV1().Leases(testenv.Namespace).Get(context.Background(), lease.HeartbeatName(n.Name), metav1.GetOptions{})
		if err != nil {
			t.Errorf("%s: no heartbeat: %v", n.Name, err)
		}
	}
	out := kubectl(t, "-n", testenv.Namespace, "logs", "daemonset/eipd", "--tail=5")
	t.Logf("kubectl logs works:\n%s", out)
}

// The client's HTTP requests to both IPs reach the web pods.
func TestAppAnswersOnBothIPs(t *testing.T) {
	installed(t)
	for _, ip := range []netip.Addr{externalIP, lbIP} {
		h := served(t, ip)
		tr := startTraffic(t, ip)
		must(t, tr.WaitAnswering(ctxFor(t, time.Minute)))
		time.Sleep(time.Second)
		s := tr.Finish()
		t.Logf("held by %s; %s; answers %v", h, s, s.Pods())
		if len(s.Pods()) < 2 {
			t.Errorf("%s: answered by %v, want several pods (kube-proxy balancing)", ip, s.Pods())
		}
	}
}

// during runs action while the client sends traffic to both IPs, and checks
// the planned-move limits on each.
func during(t *testing.T, what string, action func()) {
	t.Helper()
	for _, s := range observe(t, what, action) {
		planned(t, s)
	}
}

// observe runs action while the client sends traffic to both IPs, and
// returns what the client saw of each.
func observe(t *testing.T, what string, action func()) []workload.Seen {
	t.Helper()
	var trs []*workload.Traffic
	for _, ip := range []netip.Addr{externalIP, lbIP} {
		served(t, ip)
		tr := startTraffic(t, ip)
		must(t, tr.WaitAnswering(ctxFor(t, time.Minute)))
		trs = append(trs, tr)
	}
	began := time.Now()
	action()
	t.Logf("%s took %s", what, time.Since(began).Round(100*time.Millisecond))
	for _, ip := range []netip.Addr{externalIP, lbIP} {
		served(t, ip)
	}
	time.Sleep(500 * time.Millisecond) // the client sees the final state too
	var seen []workload.Seen
	for _, tr := range trs {
		seen = append(seen, tr.Finish())
	}
	return seen
}

func TestRolloutRestart(t *testing.T) {
	installed(t)
	during(t, "rollout restart", func() {
		kubectl(t, "-n", testenv.Namespace, "rollout", "restart", "daemonset/eipd")
		waitDaemonSet(t)
	})
}

func TestSetImage(t *testing.T) {
	installed(t)
	during(t, "set image", func() {
		kubectl(t, "-n", testenv.Namespace, "set", "image", "daemonset/eipd", "eipd="+imageName+":"+version2)
		waitDaemonSet(t)
	})
	runsImage(t, imageName+":"+version2)
}

func TestDeleteHolderPod(t *testing.T) {
	installed(t)
	during(t, "delete the holder's eipd pod", func() {
		h := holder(t, externalIP)
		pod := eipdPod(t, h)
		kubectl(t, "-n", testenv.Namespace, "delete", "pod", pod.Name, "--wait=true")
		waitDaemonSet(t)
	})
}

func TestDrainHolder(t *testing.T) {
	installed(t)
	var drained string
	during(t, "drain the holder", func() {
		drained = holder(t, externalIP)
		kubectl(t, "drain", drained, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=2m")
		for _, ip := range []netip.Addr{externalIP, lbIP} {
			eventually(t, ip.String()+" leaves the cordoned node", time.Minute, func() (bool, string) {
				h := holder(t, ip)
				return h != "" && h != drained, "held by " + h
			})
		}
	})
	if pod := eipdPod(t, drained); pod.Status.Phase != "Running" {
		t.Errorf("eipd on the drained node is %s, want it kept Running", pod.Status.Phase)
	}
	kubectl(t, "uncordon", drained)
}

// A node fails (every process of it killed, its link cut): the survivor
// its lock then names answers for its IP within the lease duration plus
// 0.5 s. When the node
// returns, its kubelet restarts eipd, and two MACs never answer.
func TestNodeFailure(t *testing.T) {
	installed(t)
	const lease = 2 * time.Second // manifests/configmap.yaml lease-duration
	failNode(t, func(string) {}, lease+500*time.Millisecond, func(string) {})
}

// A node fails and at once an operator marks it out of service (Kubernetes'
// non-graceful node shutdown), or deletes its Node: the survivor its lock
// names answers for its IP within a second, not the lease duration a
// failure alone takes to be judged. When the node returns (untainted; its
// kubelet registers its Node again), two MACs never answer.
func TestNodeOutOfService(t *testing.T) {
	installed(t)
	t.Run("tainted", func(t *testing.T) {
		failNode(t, func(h string) {
			kubectl(t, "taint", "node", h, corev1.TaintNodeOutOfService+"=nodeshutdown:NoExecute")
		}, time.Second, func(h string) {
			kubectl(t, "taint", "node", h, corev1.TaintNodeOutOfService+"-")
		})
	})
	t.Run("deleted", func(t *testing.T) {
		failNode(t, func(h string) { kubectl(t, "delete", "node", h, "--wait=false") }, time.Second, func(string) {})
	})
}

// failNode fails the holder of externalIP, then does what after (given
// the node), and fails the test unless the IP's new holder answers within
// bound of the failure; then it undoes what it did (before), revives the
// node, waits until its kubelet runs eipd again, and fails the test if two
// MACs ever answered.
func failNode(t *testing.T, after func(node string), bound time.Duration, before func(node string)) {
	t.Helper()
	h := served(t, externalIP)
	p, err := cluster.Probe(externalIP, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	old := eipdPod(t, h)
	ctx := ctxFor(t, 5*time.Minute)
	if err := cluster.FailNode(ctx, h); err != nil {
		t.Fatal(err)
	}
	failed := time.Now()
	after(h)
	// The new holder, as its lock says, answers: not merely some MAC
	// other than the dead node's, and not a late reply of the dead node.
	next := ""
	var nextMAC []byte
	eventually(t, "the new holder answers", 10*time.Second, func() (bool, string) {
		if next = holder(t, externalIP); next == "" || next == h {
			return false, fmt.Sprintf("holder %q", next)
		}
		nextMAC = nodeMAC(t, next)
		r := p.Result()
		last := r.LastMAC()
		if len(r.Replies) == 0 || !bytes.Equal(last, nextMAC) || r.Replies[len(r.Replies)-1].At.Before(failed) {
			return false, fmt.Sprintf("holder %s (%v), last reply from %v", next, net.HardwareAddr(nextMAC), last)
		}
		return true, ""
	})
	var first time.Time
	for _, rep := range p.Result().Replies {
		if rep.At.After(failed) && bytes.Equal(rep.MAC, nextMAC) {
			first = rep.At
			break
		}
	}
	took := first.Sub(failed)
	t.Logf("node %s failed; %s answered by its new holder %s after %s", h, externalIP, next, took.Round(time.Millisecond))
	if took > bound {
		t.Errorf("failover took %s, more than %s", took, bound)
	}

	before(h)
	revive(ctx, t, h, old, p)
}

// revive brings a failed or shut down node back, waits until its kubelet
// runs eipd again (old, the pod before, restarted or replaced) and the
// DaemonSet is rolled out, then stops p, the probe of externalIP, 2 s later
// and fails the test if two MACs ever answered it.
func revive(ctx context.Context, t *testing.T, h string, old corev1.Pod, p *testenv.Probe) {
	t.Helper()
	if err := cluster.ReviveNode(ctx, h); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the kubelet runs eipd again on "+h, 3*time.Minute, func() (bool, string) {
		pods, err := cluster.Client().CoreV1().Pods(testenv.Namespace).List(ctx,
			metav1.ListOptions{LabelSelector: workload.EipdSelector, FieldSelector: "spec.nodeName=" + h})
		if err != nil || len(pods.Items) != 1 {
			return false, fmt.Sprint(err, pods)
		}
		pod := pods.Items[0]
		for _, cs := range pod.Status.ContainerStatuses {
			if cs.Ready && (cs.RestartCount > 0 || pod.UID != old.UID) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("status %+v", pod.Status.ContainerStatuses)
	})
	waitDaemonSet(t)
	time.Sleep(2 * time.Second) // the returned node settles: it must not take the IP back twice
	r := p.Stop()
	for _, m := range workload.TwoMACs(r) {
		t.Errorf("two MACs answered: %s", m)
	}
	t.Logf("%s", workload.Seen{IP: externalIP, Pings: r})
}

// Uninstall: within the grace period no external IP stays bound on any
// node, and nothing eip created is left in the API.
func TestUninstall(t *testing.T) {
	installed(t)
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, ip := range []netip.Addr{externalIP, lbIP} {
		served(t, ip)
	}
	began := time.Now()
	kubectl(t, "delete", "-k", filepath.Join(root, "manifests"), "--wait=false")
	const grace = 30 * time.Second // the DaemonSet's terminationGracePeriodSeconds
	eventually(t, "no external IP bound", grace, func() (bool, string) {
		var bound []string
		for _, ip := range []netip.Addr{externalIP, lbIP} {
			for _, n := range boundOn(t, ip) {
				bound = append(bound, ip.String()+" on "+n)
			}
		}
		return len(bound) == 0, strings.Join(bound, ", ")
	})
	t.Logf("every IP unbound %s after kubectl delete -k", time.Since(began).Round(100*time.Millisecond))
	eventually(t, "no eip Lease left", 2*time.Minute, func() (bool, string) {
		ls, err := cluster.Client().CoordinationV1().Leases("").List(context.Background(),
			metav1.ListOptions{LabelSelector: lease.ManagedByLabel + "=" + lease.ManagedBy})
		if err != nil {
			return false, err.Error()
		}
		var names []string
		for _, l := range ls.Items {
			names = append(names, l.Namespace+"/"+l.Name)
		}
		return len(names) == 0, strings.Join(names, ", ")
	})
}

func nodeMAC(t *testing.T, node string) []byte {
	t.Helper()
	m, err := cluster.NodeMAC(node)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// procFields parses /proc/<pid>/<file> lines "Key:\tvalue".
func procFields(t *testing.T, pid int, file string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", fmt.Sprint(pid), file))
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m
}

func procEnv(t *testing.T, pid int) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", fmt.Sprint(pid), "environ"))
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, kv := range bytes.Split(b, []byte{0}) {
		if k, v, ok := strings.Cut(string(kv), "="); ok {
			m[k] = v
		}
	}
	return m
}

// procSysReadOnly reports whether /proc/sys is mounted read-only in the
// process's mount namespace.
func procSysReadOnly(t *testing.T, pid int) bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", fmt.Sprint(pid), "mountinfo"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 5 && f[4] == "/proc/sys" {
			return slices.Contains(strings.Split(f[5], ","), "ro")
		}
	}
	return false
}
