package realnodes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/eip-project/eip/internal/cli"
	"github.com/eip-project/eip/testenv"
	"github.com/eip-project/eip/testenv/workload"
)

// deployLocal deploys workload.LocalApp, deleted at the test's end, and
// returns its IP once its pods are ready, on distinct nodes. The deletion
// waits until its pods are gone (foreground): a pod serves for seconds
// after SIGTERM, and the Service of a test run again under the same name
// would otherwise count the last run's terminating pods as its endpoints.
func deployLocal(t *testing.T, name string, replicas int) netip.Addr {
	t.Helper()
	t.Cleanup(func() {
		kubectl(t, "-n", workload.AppNamespace, "delete", "deployment/"+name, "service/"+name, "--cascade=foreground", "--wait=true")
	})
	ip, err := workload.DeployLocal(ctxFor(t, 4*time.Minute), cluster, name, replicas)
	must(t, err)
	if nodes := podNodes(t, name); len(nodes) != replicas || len(slices.Compact(slices.Sorted(slices.Values(nodes)))) != replicas {
		t.Fatalf("%s pods on %v, want %d nodes", name, nodes, replicas)
	}
	return ip
}

// (a) An eTP=Local LoadBalancer Service with one replica: its IP is on the
// pod's node, every request succeeds, and the app sees the client's own
// address. Then the pod moves to another node as a rolling update moves
// it (the new pod ready while the old one still serves): the IP follows
// it by hand-off once kube-proxy there delivers to the new pod, and no
// request fails.
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
	noneFailed(t, tr.Finish(), began, podNode)

	next := ""
	for _, n := range cluster.Nodes() {
		if n.Name != podNode {
			next = n.Name
			break
		}
	}
	tr = startTraffic(t, ip)
	must(t, tr.WaitAnswering(ctxFor(t, time.Minute)))
	began = time.Now()
	kubectl(t, "-n", workload.AppNamespace, "patch", "deployment/web-local", "-p",
		`{"spec":{"template":{"spec":{"nodeSelector":{"kubernetes.io/hostname":"`+next+`"}}}}}`)
	kubectl(t, "-n", workload.AppNamespace, "rollout", "status", "deployment/web-local", "--timeout=3m")
	followed(t, ip, tr, began, next)
}

// followed waits until ip is held and served by next, then checks what
// the client saw of the move: within the limits of a planned move, no
// request sent from began failed, and those sent after it were answered
// on next.
func followed(t *testing.T, ip netip.Addr, tr *workload.Traffic, began time.Time, next string) {
	t.Helper()
	eventually(t, ip.String()+" follows its pod to "+next, time.Minute, func() (bool, string) {
		h := holder(t, ip)
		return h == next, "held by " + h
	})
	served(t, ip)
	moved := time.Now()
	must(t, tr.WaitAnswered(ctxFor(t, time.Minute), 20))
	s := tr.Finish()
	planned(t, s)
	noneFailed(t, s, began, "")
	for _, r := range s.Requests {
		if r.Err == nil && r.Start.After(moved) {
			answeredFrom(t, r, next)
		}
	}
}

// noneFailed checks that every request from since was answered, with the
// client's own address seen, and on node unless it is "". It forgives one
// failure only: a connection reset while the IP switched nodes
// (workload.Seen.ResetBySwitch), which no placement of the IP avoids.
func noneFailed(t *testing.T, s workload.Seen, since time.Time, node string) {
	t.Helper()
	t.Log(s)
	reset := 0
	for _, r := range s.Requests {
		switch {
		case r.Start.Before(since):
		case s.ResetBySwitch(r):
			reset++
		case r.Err != nil:
			t.Errorf("request at %s failed: %v", r.Start.Format(time.StampMilli), r.Err)
		default:
			answeredFrom(t, r, node)
		}
	}
	t.Logf("%d requests reset as the IP switched nodes", reset)
}

// answeredFrom checks that r was answered on node (any, when ""), and that
// the app saw the client's own address.
func answeredFrom(t *testing.T, r workload.Request, node string) {
	t.Helper()
	if want := "node=" + node; r.Remote != testenv.ClientAddr().String() || node != "" && !slices.Contains(strings.Fields(r.Answer), want) {
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
			_, all, err := workload.PodNodes(context.Background(), cluster, "web-roll")
			return err == nil && all == 2, fmt.Sprint(all, " pods ", err)
		})
	}
	after := served(t, ip)
	must(t, tr.WaitAnswered(ctxFor(t, time.Minute), 50))
	s := tr.Finish()
	t.Logf("held by %s before %d rollouts, %s after; answers %v", before, rollouts, after, s.Pods())
	noneFailed(t, s, began, "")
	for _, m := range workload.TwoMACs(s.Pings) {
		t.Errorf("%s: two MACs answered: %s", ip, m)
	}
}

// unexplained checks that no request failed while an endpoint served
// (workload.LocalMove.Unexplained).
func unexplained(t *testing.T, m workload.LocalMove) {
	t.Helper()
	for _, r := range m.Unexplained() {
		t.Errorf("request at %s failed (no endpoint served for %s; the new one ready at %s): %v",
			r.Start.Format(time.StampMilli), m.NoneServing, m.Ready.Format(time.StampMilli), r.Err)
	}
}

// (b) The one pod of an eTP=Local Service is deleted and comes back on
// another node (its own is tainted): the IP follows it. Requests fail only
// while no endpoint serves anywhere, or until kube-proxy on the new node
// delivers to the new pod when none served meanwhile.
func TestLocalPodDeletedComesBackElsewhere(t *testing.T) {
	installed(t)
	ip := deployLocal(t, "web-del", 1)
	from := served(t, ip)
	m, err := workload.MoveLocalPod(ctxFor(t, 3*time.Minute), cluster, "web-del", ip)
	must(t, err)
	t.Logf("pod deleted on %s, back %s", from, m)
	if m.To == from {
		t.Fatalf("the new pod runs on %s again", from)
	}
	unexplained(t, m)
	for _, r := range m.Seen.Requests {
		if r.Err == nil && r.Start.After(m.Answered) {
			answeredFrom(t, r, m.To)
		}
	}
}

// (d) Scaled to zero, an eTP=Local Service's IP is bound nowhere: status
// says no-endpoints, and a Warning NoEndpoints Event is on the Service.
// Scaled back to one, the IP is bound on the pod's node and answers, and
// an EndpointsReady Event says so.
func TestLocalScaleToZeroAndBack(t *testing.T) {
	installed(t)
	ip := deployLocal(t, "web-zero", 1)
	served(t, ip)
	began := time.Now()
	unbound, err := workload.ScaleToZero(ctxFor(t, time.Minute), cluster, "web-zero", ip)
	must(t, err)
	t.Logf("%s bound nowhere %s after the scale to zero", ip, unbound.Round(time.Millisecond))
	eventually(t, "status says no-endpoints", time.Minute, func() (bool, string) {
		row := statusRow(t, ip)
		return row.State == cli.StateNoEndpoints && strings.Contains(row.Reason, "no node has a ready endpoint of default/web-zero"),
			fmt.Sprintf("%s: %s", row.State, row.Reason)
	})
	eventSince(t, "web-zero", "NoEndpoints", began, ip.String()+" is not bound")

	back := time.Now()
	m, err := workload.ScaleBack(ctxFor(t, 3*time.Minute), cluster, "web-zero", ip)
	must(t, err)
	t.Logf("scaled back: %s", m)
	if h := served(t, ip); h != m.To {
		t.Errorf("%s held by %s, its pod runs on %s", ip, h, m.To)
	}
	eventSince(t, "web-zero", "EndpointsReady", back, ip.String()+" may be bound again")
	unexplained(t, m)
	for _, r := range m.Seen.Requests {
		if r.Err == nil {
			answeredFrom(t, r, m.To)
		}
	}
}

// eventSince waits for an Event of reason on Service name, last seen
// since since, whose message contains want.
func eventSince(t *testing.T, name, reason string, since time.Time, want string) {
	t.Helper()
	eventually(t, "Event "+reason+" on "+name, time.Minute, func() (bool, string) {
		evs, err := cluster.Client().CoreV1().Events(workload.AppNamespace).List(context.Background(),
			metav1.ListOptions{FieldSelector: "involvedObject.kind=Service,involvedObject.name=" + name + ",reason=" + reason})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, ev := range evs.Items {
			last := ev.LastTimestamp.Time
			if ev.Series != nil {
				last = ev.Series.LastObservedTime.Time
			}
			if ev.EventTime.After(last) {
				last = ev.EventTime.Time
			}
			if last.Before(since.Truncate(time.Second)) {
				continue
			}
			if strings.Contains(ev.Message, want) {
				return true, ""
			}
			seen = append(seen, ev.Message)
		}
		return false, fmt.Sprint("seen ", seen)
	})
}

// statusRow is the row of ip in `kubectl eip status -o json`, run from
// the client namespace with the plugin of KUBECTL_EIP_BIN.
func statusRow(t *testing.T, ip netip.Addr) cli.IP {
	t.Helper()
	bin := os.Getenv("KUBECTL_EIP_BIN")
	if bin == "" {
		t.Skip("KUBECTL_EIP_BIN is not set (make build)")
	}
	out, err := cluster.Exec(ctxFor(t, time.Minute), testenv.Client, bin, "--kubeconfig="+cluster.AdminKubeconfig(), "-n", testenv.Namespace, "status", "-o", "json")
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	var st cli.Status
	must(t, json.Unmarshal(out, &st))
	for _, r := range st.IPs {
		if r.IP == ip.String() {
			return r
		}
	}
	t.Fatalf("no status row for %s", ip)
	return cli.IP{}
}

// podNodes lists the nodes of the pods of app name that are not
// terminating.
func podNodes(t *testing.T, name string) []string {
	t.Helper()
	nodes, _, err := workload.PodNodes(context.Background(), cluster, name)
	must(t, err)
	return nodes
}

// A drain of the node holding a one-replica eTP=Local Service's IP: the
// node, cordoned, may hold the IP no more, and its pod, evicted, still
// serves while the pod that replaces it becomes ready on another node.
// The IP leaves only once kube-proxy there delivers to the new pod, as it
// does from a holder whose pod stops serving: no request fails, the IP
// ends on the new pod's node, and Events on the Service say the holder
// waited for kube-proxy there and that it delivered.
func TestLocalDrainHolder(t *testing.T) {
	installed(t)
	ip := deployLocal(t, "web-drain", 1)
	from := served(t, ip)
	t.Cleanup(func() { kubectl(t, "uncordon", from) })
	// The IP is bound as its pod becomes ready, and kube-proxy there
	// refuses its first requests until its rules have the pod: that is
	// before the drain, not measured.
	warm := startTraffic(t, ip)
	must(t, warm.WaitAnswering(ctxFor(t, time.Minute)))
	warm.Finish()
	tr := startTraffic(t, ip)
	must(t, tr.WaitAnswering(ctxFor(t, time.Minute)))
	began := time.Now()
	kubectl(t, "drain", from, "--pod-selector=app=web-drain", "--ignore-daemonsets", "--timeout=2m")
	var to string
	eventually(t, "the new pod on another node", time.Minute, func() (bool, string) {
		nodes := podNodes(t, "web-drain")
		if len(nodes) != 1 || nodes[0] == from {
			return false, fmt.Sprint("pods on ", nodes)
		}
		to = nodes[0]
		return true, ""
	})
	followed(t, ip, tr, began, to)
	// The holder said that it waited, and why it stopped.
	eventSince(t, "web-drain", "WaitingForKubeProxy", began, ip.String()+" stays on "+from)
	eventSince(t, "web-drain", "KubeProxyDelivers", began, "kube-proxy on "+to+" delivers to "+workload.AppNamespace+"/web-drain")
}
