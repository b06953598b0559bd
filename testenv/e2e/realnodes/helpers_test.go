package realnodes

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/eip-project/eip/internal/lease"
	"github.com/eip-project/eip/testenv"
)

const (
	appNamespace = "default"
	// eipdSelector selects the DaemonSet's pods (manifests/daemonset.yaml).
	eipdSelector = "app.kubernetes.io/name=eip,app.kubernetes.io/component=eipd"
)

// The web application's two IPs: an external IP from the first range and
// the LoadBalancer IP eip allocates from the auto-assign pool.
var (
	externalIP = testenv.ServiceIP(1)
	lbPool     = netip.MustParsePrefix("198.18.101.0/24")
	ranges     = testenv.ServiceIP(1).String() + "/32\n" + lbPool.String() + " name=pool auto-assign\n"
)

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// kubectl runs kubectl as cluster admin from the client namespace.
func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := cluster.Kubectl(ctxFor(t, 4*time.Minute), args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v", strings.Join(args, " "), err)
	}
	return string(out)
}

func eventually(t *testing.T, what string, within time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %s", what, within, why)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var (
	installOnce sync.Once
	installErr  string
	lbIP        netip.Addr
)

// installed installs eip from manifests/ and the web application once, and
// fails the test if that failed.
func installed(t *testing.T) {
	t.Helper()
	installOnce.Do(func() {
		var ok bool
		t.Run("install", func(t *testing.T) {
			install(t)
			ok = !t.Failed()
		})
		if !ok {
			installErr = "install failed (see the install subtest)"
		}
	})
	if installErr != "" {
		t.Fatal(installErr)
	}
}

func install(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	kubectl(t, "apply", "-k", filepath.Join(root, "manifests"))
	setRanges(t)
	waitDaemonSet(t)
	t.Logf("eipd Ready on every node %s after kubectl apply -k", time.Since(began).Round(100*time.Millisecond))
	if err := cluster.Apply(ctxFor(t, time.Minute), []byte(webApp)); err != nil {
		t.Fatal(err)
	}
	kubectl(t, "-n", appNamespace, "rollout", "status", "deployment/web", "--timeout=3m")
	eventually(t, "LoadBalancer IP allocated", time.Minute, func() (bool, string) {
		svc, err := cluster.Client().CoreV1().Services(appNamespace).Get(context.Background(), "web-lb", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, in := range svc.Status.LoadBalancer.Ingress {
			if a, err := netip.ParseAddr(in.IP); err == nil && lbPool.Contains(a) {
				lbIP = a
				return true, ""
			}
		}
		return false, fmt.Sprint(svc.Status.LoadBalancer.Ingress)
	})
}

func setRanges(t *testing.T) {
	t.Helper()
	cms := cluster.Client().CoreV1().ConfigMaps(testenv.Namespace)
	cm, err := cms.Get(context.Background(), testenv.ConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["ranges"] = ranges
	if _, err := cms.Update(context.Background(), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func waitDaemonSet(t *testing.T) {
	t.Helper()
	kubectl(t, "-n", testenv.Namespace, "rollout", "status", "daemonset/eipd", "--timeout=3m")
}

// webApp is the application behind eip's IPs: three pods on pod networking
// behind a Service with an external IP and a LoadBalancer Service. The pods
// keep serving for a few seconds after SIGTERM (web does), so that no
// request reaches a pod that stopped listening while endpoints update.
var webApp = `apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: ` + appNamespace + `}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 15
      topologySpreadConstraints:
      - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: ScheduleAnyway, labelSelector: {matchLabels: {app: web}}}
      containers:
      - name: web
        image: localhost/eip-testenv/web:1
        ports: [{containerPort: 8080}]
        readinessProbe: {httpGet: {path: /, port: 8080}, periodSeconds: 1}
        env:
        - {name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
        - {name: NODE_NAME, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}
---
apiVersion: v1
kind: Service
metadata: {name: web-ext, namespace: ` + appNamespace + `}
spec:
  selector: {app: web}
  externalIPs: ["` + externalIP.String() + `"]
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: web-lb, namespace: ` + appNamespace + `}
spec:
  type: LoadBalancer
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
`

// holder is the node the IP's lock names, "" if none.
func holder(t *testing.T, ip netip.Addr) string {
	t.Helper()
	l, err := cluster.Client().CoordinationV1().Leases(testenv.Namespace).Get(context.Background(), lease.NameFor(ip), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// boundOn lists the nodes that have ip on an interface.
func boundOn(t *testing.T, ip netip.Addr) []string {
	t.Helper()
	var on []string
	for _, n := range cluster.Nodes() {
		has, err := cluster.NodeHasAddr(n.Name, ip)
		if err != nil {
			t.Fatal(err)
		}
		if has {
			on = append(on, n.Name)
		}
	}
	return on
}

// served waits until ip is held and bound on its holder alone, and
// returns the holder.
func served(t *testing.T, ip netip.Addr) string {
	t.Helper()
	var h string
	eventually(t, ip.String()+" bound on its holder alone", time.Minute, func() (bool, string) {
		h = holder(t, ip)
		on := boundOn(t, ip)
		return h != "" && len(on) == 1 && on[0] == h, fmt.Sprintf("holder %q, bound on %v", h, on)
	})
	return h
}

// eipdPod is the DaemonSet's pod on the node.
func eipdPod(t *testing.T, node string) corev1.Pod {
	t.Helper()
	pods, err := cluster.Client().CoreV1().Pods(testenv.Namespace).List(context.Background(),
		metav1.ListOptions{LabelSelector: eipdSelector, FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			return p
		}
	}
	t.Fatalf("no eipd pod on %s", node)
	return corev1.Pod{}
}

// eipdProcess is the pid of the eipd process running in the node's network
// namespace, found in /proc.
func eipdProcess(t *testing.T, node testenv.Node) int {
	t.Helper()
	var want os.FileInfo
	want, err := os.Stat("/run/netns/" + node.Netns)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		comm, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		if err != nil || strings.TrimSpace(string(comm)) != "eipd" {
			continue
		}
		ns, err := os.Stat(filepath.Join("/proc", e.Name(), "ns", "net"))
		if err == nil && os.SameFile(ns, want) {
			var pid int
			fmt.Sscan(e.Name(), &pid)
			return pid
		}
	}
	t.Fatalf("no eipd process in %s", node.Netns)
	return 0
}
