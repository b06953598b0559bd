package realnodes

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/eip-project/eip/testenv"
	"github.com/eip-project/eip/testenv/workload"
)

// localApp is replicas of the web application named name behind a
// LoadBalancer Service with externalTrafficPolicy: Local: kube-proxy
// delivers its traffic only on a pod's node, without masquerading the
// client. Its pods are spread over the nodes, strictly: never two on one
// node while another has none (maxSkew 1; the scheduler counts no
// terminating pod), so a rolling update moves each pod to another node.
func localApp(name string, replicas int) string {
	return strings.Replace(workload.WebDeployment(name, replicas), "ScheduleAnyway", "DoNotSchedule", 1) + `---
apiVersion: v1
kind: Service
metadata: {name: ` + name + `, namespace: ` + workload.AppNamespace + `}
spec:
  type: LoadBalancer
  externalTrafficPolicy: Local
  selector: {app: ` + name + `}
  ports: [{port: 80, targetPort: 8080}]
`
}

// deployLocal deploys localApp, deleted at the test's end, and returns its
// IP once its pods are ready, on distinct nodes.
func deployLocal(t *testing.T, name string, replicas int) netip.Addr {
	t.Helper()
	must(t, cluster.Apply(ctxFor(t, time.Minute), []byte(localApp(name, replicas))))
	t.Cleanup(func() {
		kubectl(t, "-n", workload.AppNamespace, "delete", "deployment/"+name, "service/"+name, "--wait=true")
	})
	kubectl(t, "-n", workload.AppNamespace, "rollout", "status", "deployment/"+name, "--timeout=3m")
	ip := ingressIP(t, name)
	if nodes := podNodes(t, name); len(nodes) != replicas || len(slices.Compact(slices.Sorted(slices.Values(nodes)))) != replicas {
		t.Fatalf("%s pods on %v, want %d nodes", name, nodes, replicas)
	}
	return ip
}

// (a) An eTP=Local LoadBalancer Service with one replica: its IP is on the
// pod's node, every request succeeds, and the app sees the client's own
// address. Then the pod moves to another node as a rolling update moves
// it (the new pod Ready while the old one still serves): the IP follows it
// by hand-off, checked as a planned move. That check forgives requests
// failed within maxGap of the move: on this bed the new node's kube-proxy
// often delivers to its new local endpoint only about 0.9 s after eipd
// moved the IP there (its rules lag the EndpointSlice that moved the IP),
// and requests sent meanwhile time out.
func TestLocalOneReplica(t *testing.T) {
	installed(t)
	ip := deployLocal(t, "web-local", 1)
	podNode := podNodes(t, "web-local")[0]
	if h := served(t, ip); h != podNode {
		t.Fatalf("%s held by %s, its pod runs on %s", ip, h, podNode)
	}
	tr := startTraffic(t, ip)
	must(t, tr.WaitAnswering(ctxFor(t, time.Minute)))
	began := time.Now()
	must(t, tr.WaitAnswered(ctxFor(t, time.Minute), 100))
	s := tr.Finish()
	t.Log(s)
	for _, r := range s.Requests {
		if r.Start.Before(began) {
			continue
		}
		if r.Err != nil {
			t.Errorf("request at %s failed: %v", r.Start.Format(time.StampMilli), r.Err)
			continue
		}
		answeredFrom(t, r, podNode)
	}

	next := ""
	for _, n := range cluster.Nodes() {
		if n.Name != podNode {
			next = n.Name
			break
		}
	}
	tr = startTraffic(t, ip)
	must(t, tr.WaitAnswering(ctxFor(t, time.Minute)))
	kubectl(t, "-n", workload.AppNamespace, "patch", "deployment/web-local", "-p",
		`{"spec":{"template":{"spec":{"nodeSelector":{"kubernetes.io/hostname":"`+next+`"}}}}}`)
	kubectl(t, "-n", workload.AppNamespace, "rollout", "status", "deployment/web-local", "--timeout=3m")
	eventually(t, ip.String()+" follows its pod to "+next, time.Minute, func() (bool, string) {
		h := holder(t, ip)
		return h == next, "held by " + h
	})
	served(t, ip)
	moved := time.Now()
	must(t, tr.WaitAnswered(ctxFor(t, time.Minute), 20))
	s = tr.Finish()
	planned(t, s)
	for _, r := range s.Requests {
		if r.Err == nil && r.Start.After(moved) {
			answeredFrom(t, r, next)
		}
	}
}

// answeredFrom checks that r was answered on node, and that the app saw
// the client's own address.
func answeredFrom(t *testing.T, r workload.Request, node string) {
	t.Helper()
	if want := "node=" + node; r.Remote != testenv.ClientAddr().String() || !slices.Contains(strings.Fields(r.Answer), want) {
		t.Errorf("answer %q seen from %s; want %s and the client's address %s", r.Answer, r.Remote, want, testenv.ClientAddr())
	}
}

// rollouts is how many rolling updates TestLocalRollingUpdate makes.
const rollouts = 4

// (c) A rolling update of a 2-replica eTP=Local Deployment, its pods on
// different nodes, loses no request: the IP leaves a node whose pod is
// terminating only for a node whose kube-proxy already delivers to its
// new ready pod, and the old pod still serves meanwhile. Each rollout
// moves the IP once or twice; a few of them make a lost race show.
func TestLocalRollingUpdate(t *testing.T) {
	installed(t)
	ctx := ctxFor(t, 5*time.Minute)
	ip := deployLocal(t, "web-roll", 2)
	before := served(t, ip)
	tr := startTraffic(t, ip)
	must(t, tr.WaitAnswering(ctxFor(t, time.Minute)))
	began := time.Now()
	for range rollouts {
		kubectl(t, "-n", workload.AppNamespace, "rollout", "restart", "deployment/web-roll")
		kubectl(t, "-n", workload.AppNamespace, "rollout", "status", "deployment/web-roll", "--timeout=3m")
		// The last old pod serves 3 s after SIGTERM: requests go on
		// until it is gone.
		eventually(t, "the old pods gone", time.Minute, func() (bool, string) {
			pods, err := cluster.Client().CoreV1().Pods(workload.AppNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app=web-roll"})
			if err != nil {
				return false, err.Error()
			}
			return len(pods.Items) == 2, fmt.Sprint(len(pods.Items), " pods")
		})
	}
	after := served(t, ip)
	must(t, tr.WaitAnswered(ctxFor(t, time.Minute), 50))
	s := tr.Finish()
	t.Logf("held by %s before %d rollouts, %s after; %s; answers %v", before, rollouts, after, s, s.Pods())
	for _, r := range s.Requests {
		if r.Start.Before(began) {
			continue
		}
		if r.Err != nil {
			t.Errorf("request at %s failed: %v", r.Start.Format(time.StampMilli), r.Err)
		} else if r.Remote != testenv.ClientAddr().String() {
			t.Errorf("answer %q seen from %s, want the client's address %s", r.Answer, r.Remote, testenv.ClientAddr())
		}
	}
	for _, m := range workload.TwoMACs(s.Pings) {
		t.Errorf("%s: two MACs answered: %s", ip, m)
	}
}

// ingressIP waits until the LoadBalancer Service name has an address.
func ingressIP(t *testing.T, name string) netip.Addr {
	t.Helper()
	var ip netip.Addr
	eventually(t, name+" gets an address", time.Minute, func() (bool, string) {
		svc, err := cluster.Client().CoreV1().Services(workload.AppNamespace).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, in := range svc.Status.LoadBalancer.Ingress {
			if a, err := netip.ParseAddr(in.IP); err == nil {
				ip = a
				return true, ""
			}
		}
		return false, "no ingress"
	})
	return ip
}

// podNodes lists the nodes of the pods labelled app=name that are not
// terminating.
func podNodes(t *testing.T, name string) []string {
	t.Helper()
	pods, err := cluster.Client().CoreV1().Pods(workload.AppNamespace).List(context.Background(), metav1.ListOptions{LabelSelector: "app=" + name})
	must(t, err)
	var nodes []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			nodes = append(nodes, p.Spec.NodeName)
		}
	}
	return nodes
}
