package realnodes

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/eip-project/eip/testenv"
)

// An eip-config that only eipd can refuse (a range holding a node's own
// address, which the admission policy cannot see) is stored; then a
// rollout restarts every eipd, and every eipd is killed at once. Each
// starts under the invalid ConfigMap with the last good configuration:
// the rollout hands every IP off as usual, and after the kill every IP is
// bound and answers HTTP again, from its holder alone. Without a last good
// configuration either, a starting eipd is not ready.
func TestInvalidConfigRolloutAndKillAll(t *testing.T) {
	installed(t)
	ctx := ctxFor(t, 10*time.Minute)
	cms := cluster.Client().CoreV1().ConfigMaps(testenv.Namespace)
	cm, err := cms.Get(ctx, "eip-config", metav1.GetOptions{})
	must(t, err)
	good := cm.Data["ranges"]
	node, err := cluster.Client().CoreV1().Nodes().Get(ctx, cluster.Nodes()[0].Name, metav1.GetOptions{})
	must(t, err)
	var nodeIP string
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			nodeIP = a.Address
		}
	}
	if _, err := netip.ParseAddr(nodeIP); err != nil {
		t.Fatalf("node %s has no internal IP: %v", node.Name, node.Status.Addresses)
	}
	patch := func(ranges string) {
		b, err := json.Marshal(map[string]any{"data": map[string]string{"ranges": ranges}})
		must(t, err)
		kubectl(t, "-n", testenv.Namespace, "patch", "configmap", "eip-config", "--type=merge", "-p", string(b))
	}
	patch(good + "\n" + nodeIP)
	t.Cleanup(func() { patch(good) })
	eventually(t, "every eipd refuses the edit", time.Minute, func() (bool, string) {
		evs, err := cluster.Client().CoreV1().Events(testenv.Namespace).List(context.Background(),
			metav1.ListOptions{FieldSelector: "involvedObject.name=eip-config,reason=InvalidConfig"})
		if err != nil {
			return false, err.Error()
		}
		for _, e := range evs.Items {
			if strings.Contains(e.Message, nodeIP) {
				return true, ""
			}
		}
		return false, "no InvalidConfig event naming " + nodeIP
	})

	during(t, "rollout restart under an invalid eip-config", func() {
		kubectl(t, "-n", testenv.Namespace, "rollout", "restart", "daemonset/eipd")
		waitDaemonSet(t)
	})

	began := time.Now()
	for _, n := range cluster.Nodes() {
		must(t, syscall.Kill(eipdProcess(t, n), syscall.SIGKILL))
	}
	for _, ip := range []netip.Addr{externalIP, lbIP} {
		h := served(t, ip)
		tr := startTraffic(t, ip)
		must(t, tr.WaitAnswering(ctxFor(t, time.Minute)))
		t.Logf("every eipd killed: %s bound on %s and answering HTTP %s later", ip, h, time.Since(began).Round(100*time.Millisecond))
		tr.Finish()
	}
	waitDaemonSet(t)

	// With the last good configuration gone too, an eipd that starts has
	// no configuration at all: its /readyz fails and says why, so that a
	// rollout would stop there. Fixing eip-config makes it ready, and the
	// eipds keep the fixed configuration as the last good one again.
	kubectl(t, "-n", testenv.Namespace, "patch", "configmap", "eip-config-last-good", "--type=merge", "-p", `{"data":null}`)
	bare := cluster.Nodes()[0]
	for _, n := range cluster.Nodes() {
		if n.Name != holder(t, externalIP) && n.Name != holder(t, lbIP) {
			bare = n
		}
	}
	must(t, syscall.Kill(eipdProcess(t, bare), syscall.SIGKILL))
	eventually(t, "/readyz of "+bare.Name+" fails for want of a configuration", 2*time.Minute, func() (bool, string) {
		code, body, err := readyz(bare.Name)
		return err == nil && code == http.StatusServiceUnavailable && strings.Contains(body, "no valid configuration"),
			fmt.Sprintf("%d %q %v", code, body, err)
	})
	patch(good)
	waitDaemonSet(t)
	eventually(t, "the fixed configuration is kept as the last good one", time.Minute, func() (bool, string) {
		lg, err := cms.Get(ctx, "eip-config-last-good", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return lg.Data["ranges"] == good, fmt.Sprintf("%q", lg.Data["ranges"])
	})
	for _, ip := range []netip.Addr{externalIP, lbIP} {
		served(t, ip)
	}
}

// readyz asks node's eipd for /readyz from the client namespace.
func readyz(node string) (int, string, error) {
	resp, err := cluster.ClientHTTP().Get("http://" + cluster.DaemonMetricsAddr(node) + "/readyz")
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}
