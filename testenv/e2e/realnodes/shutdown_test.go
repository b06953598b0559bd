package realnodes

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/eip-project/eip/testenv/realnode"
	"github.com/eip-project/eip/testenv/workload"
)

// gracefulShutdown is every node's kubelet configuration for graceful node
// shutdown, and its logind's InhibitDelayMaxSec: pods of an ordinary
// priority get 10 s, then the critical ones, eipd among them, the other 10 s.
var gracefulShutdown = realnode.GracefulShutdown{Period: 20 * time.Second, CriticalPods: 10 * time.Second}

// The holder's operating system shuts down, as `systemctl poweroff` on it
// would, with the kubelet's graceful node shutdown configured
// (gracefulShutdown). The node runs Debian's dbus-daemon and systemd-logind;
// only the init system is a stand-in, which powers the node off once
// logind asks it to (see realnode.GracefulShutdown). logind announces the
// shutdown to the kubelet, which holds a delay lock; the kubelet stops the
// node's pods, eipd (a critical pod) last, with SIGTERM; eipd hands its
// IPs to peers; the kubelet releases its lock and the node goes down
// (every process killed, its link cut). The client sees a hand-off, not a
// failover: each IP's new holder answers before the node goes down, no gap
// or failed request beyond a hand-off (planned), and never two MACs, also
// not once the node boots again.
//
// The web pods run on the other nodes meanwhile: the kubelet stops probing
// the pods of a node shutting down and never marks them not ready, so they
// stay in their Services' endpoints until they have stopped, and requests
// that kube-proxy sends them fail, whatever node the IP is on (Kubernetes
// issue 116965; docs/operating.md).
func TestGracefulNodeShutdown(t *testing.T) {
	installed(t)
	h := served(t, externalIP)
	old := eipdPod(t, h)
	ctx := ctxFor(t, 5*time.Minute)
	webAvoids(t, h)
	defer webAvoids(t, "")
	// Watches externalIP from before the shutdown until the node is back.
	p, err := cluster.Probe(externalIP, 0)
	must(t, err)
	defer p.Stop()
	held := map[netip.Addr]bool{}
	var began, off time.Time
	seen := observe(t, "graceful shutdown of the holder", func() {
		for _, ip := range []netip.Addr{externalIP, lbIP} {
			held[ip] = holder(t, ip) == h
		}
		began = time.Now()
		must(t, cluster.ShutdownNode(ctx, h))
		off = time.Now()
	})
	t.Logf("%s shut down: logind went on to power off %s after PowerOff", h, off.Sub(began).Round(time.Millisecond))
	for _, s := range seen {
		planned(t, s)
		for _, r := range s.Failed() {
			t.Logf("%s: HTTP request at PowerOff+%s failed: %v", s.IP, r.Start.Sub(began).Round(time.Millisecond), r.Err)
		}
		if held[s.IP] {
			answeredBeforeOff(t, s, h, began, off)
		}
	}
	kubeletSawShutdown(ctx, t, h)

	revive(ctx, t, h, old, p)
}

// answeredBeforeOff checks that the IP, held by the node shut down, is held
// by another node whose MAC answered the client before the node went down
// (off): eipd handed it off on SIGTERM; a failover would begin only after.
func answeredBeforeOff(t *testing.T, s workload.Seen, shut string, began, off time.Time) {
	t.Helper()
	next := holder(t, s.IP)
	if next == "" || next == shut {
		t.Errorf("%s: held by %q after %s shut down", s.IP, next, shut)
		return
	}
	mac := nodeMAC(t, next)
	var first time.Time
	for _, rep := range s.Pings.Replies {
		if rep.At.After(began) && bytes.Equal(rep.MAC, mac) {
			first = rep.At
			break
		}
	}
	if first.IsZero() || !first.Before(off) {
		t.Errorf("%s: its new holder %s (%s) first answered at %s, not before %s went down at %s", s.IP, next,
			net.HardwareAddr(mac), first.Format(time.StampMilli), shut, off.Format(time.StampMilli))
		return
	}
	t.Logf("%s: answered by its new holder %s %s after PowerOff, %s before the node went down; %d of %d HTTP requests failed",
		s.IP, next, first.Sub(began).Round(time.Millisecond), off.Sub(first).Round(time.Millisecond), len(s.Failed()), len(s.Requests))
}

// kubeletSawShutdown checks that the node's kubelet reacted to logind's
// announcement: its shutdown manager's Event (reason Shutdown).
func kubeletSawShutdown(ctx context.Context, t *testing.T, node string) {
	t.Helper()
	eventually(t, "the kubelet's Shutdown Event for "+node, 30*time.Second, func() (bool, string) {
		evs, err := cluster.Client().CoreV1().Events("").List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + node})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range evs.Items {
			if e.Reason == "Shutdown" && e.Message == "Shutdown manager detected shutdown event" {
				return true, ""
			}
			seen = append(seen, e.Namespace+"/"+e.Reason+": "+e.Message)
		}
		return false, fmt.Sprintf("the Node's Events: %q", seen)
	})
}

// webAvoids runs the web pods on nodes other than node, or anywhere with
// "", and waits until the rollout is done, no web pod is left on node,
// and both IPs answer.
func webAvoids(t *testing.T, node string) {
	t.Helper()
	patch := []string{"--type=json", `-p=[{"op":"remove","path":"/spec/template/spec/affinity"}]`}
	if node != "" {
		patch = []string{"--type=merge", `-p={"spec":{"template":{"spec":{"affinity":{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":` +
			`{"nodeSelectorTerms":[{"matchExpressions":[{"key":"kubernetes.io/hostname","operator":"NotIn","values":["` + node + `"]}]}]}}}}}}}`}
	}
	kubectl(t, append([]string{"-n", workload.AppNamespace, "patch", "deployment", "web"}, patch...)...)
	kubectl(t, "-n", workload.AppNamespace, "rollout", "status", "deployment/web", "--timeout=3m")
	if node != "" {
		eventually(t, "no web pod on "+node, time.Minute, func() (bool, string) {
			pods, err := cluster.Client().CoreV1().Pods(workload.AppNamespace).List(context.Background(),
				metav1.ListOptions{LabelSelector: "app=web", FieldSelector: "spec.nodeName=" + node})
			if err != nil {
				return false, err.Error()
			}
			var names []string
			for _, p := range pods.Items {
				names = append(names, p.Name)
			}
			return len(names) == 0, fmt.Sprint(names)
		})
	}
	for _, ip := range []netip.Addr{externalIP, lbIP} {
		tr := startTraffic(t, ip)
		must(t, tr.WaitAnswering(ctxFor(t, time.Minute)))
		tr.Finish()
	}
}
