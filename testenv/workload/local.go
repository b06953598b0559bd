package workload

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/eip-project/eip/internal/endpoints"
	"github.com/eip-project/eip/testenv"
)

// LocalApp is replicas of the web application named name behind a
// LoadBalancer Service with externalTrafficPolicy: Local: kube-proxy
// delivers its traffic only on a pod's node, without masquerading the
// client. Its pods are spread over the nodes strictly: never two on one
// node while another has none (maxSkew 1; the scheduler counts no
// terminating pod), so a rolling update moves each pod to another node.
func LocalApp(name string, replicas int) string {
	return strings.Replace(WebDeployment(name, replicas), "ScheduleAnyway", "DoNotSchedule", 1) + `---
apiVersion: v1
kind: Service
metadata: {name: ` + name + `, namespace: ` + AppNamespace + `}
spec:
  type: LoadBalancer
  externalTrafficPolicy: Local
  selector: {app: ` + name + `}
  ports: [{port: 80, targetPort: 8080}]
`
}

// DeployLocal applies LocalApp, waits until its pods are ready and returns
// the IP eip gave its Service.
func DeployLocal(ctx context.Context, c *testenv.Cluster, name string, replicas int) (netip.Addr, error) {
	if err := c.Apply(ctx, []byte(LocalApp(name, replicas))); err != nil {
		return netip.Addr{}, err
	}
	if err := kubectl(ctx, c, "-n", AppNamespace, "rollout", "status", "deployment/"+name, "--timeout=3m"); err != nil {
		return netip.Addr{}, err
	}
	for {
		svc, err := c.Client().CoreV1().Services(AppNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return netip.Addr{}, err
		}
		for _, in := range svc.Status.LoadBalancer.Ingress {
			if a, err := netip.ParseAddr(in.IP); err == nil {
				return a, nil
			}
		}
		if err := pause(ctx); err != nil {
			return netip.Addr{}, fmt.Errorf("wait for an address of %s: %w", name, err)
		}
	}
}

// PodNodes lists the nodes of app name's pods that are not terminating,
// and how many pods it has in all.
func PodNodes(ctx context.Context, c *testenv.Cluster, name string) (nodes []string, all int, err error) {
	pods, err := c.Client().CoreV1().Pods(AppNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil {
		return nil, 0, err
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Spec.NodeName != "" {
			nodes = append(nodes, p.Spec.NodeName)
		}
	}
	return nodes, len(pods.Items), nil
}

// LocalMove is how one eTP=Local Service's IP followed its one pod to
// node To after an action at Began (a pod deleted, a scale from zero).
type LocalMove struct {
	To    string
	Began time.Time
	// Ready is when the EndpointSlice first showed the new pod ready,
	// Held when the IP's lock was first seen naming To, Answered when the
	// first request answered on To ended: from Ready to Held is eip's
	// part of the move, from Held to Answered mostly kube-proxy's.
	Ready, Held, Answered time.Time
	// NoneServing is how long no endpoint of the Service served anywhere
	// (by the EndpointSlices) while the client watched.
	NoneServing time.Duration
	Seen        Seen
}

// ReadyToAnswer is the IP's move time: from the new pod ready to its node
// answering.
func (m LocalMove) ReadyToAnswer() time.Duration { return m.Answered.Sub(m.Ready) }

// ActionToAnswer is from the action to the new pod's node answering.
func (m LocalMove) ActionToAnswer() time.Duration { return m.Answered.Sub(m.Began) }

// KubeProxySync is how long kube-proxy may take to deliver to a new
// endpoint on its node: it syncs its rules at most once a second.
const KubeProxySync = 1500 * time.Millisecond

// Unexplained are the requests sent after the action that failed though
// an endpoint served: not reset as the IP switched nodes
// (Seen.ResetBySwitch), and, if no endpoint served for a while, started
// more than KubeProxySync after the new one was ready.
func (m LocalMove) Unexplained() []Request {
	var out []Request
	for _, r := range m.Seen.Failed() {
		if r.Start.After(m.Began) && !m.Seen.ResetBySwitch(r) && (m.NoneServing == 0 || r.Start.After(m.Ready.Add(KubeProxySync))) {
			out = append(out, r)
		}
	}
	return out
}

func (m LocalMove) String() string {
	return fmt.Sprintf("to %s: pod ready %s after the action, its lock seen naming %s %s after that, answered there %s after ready (%s after the action); no endpoint served for %s; %s",
		m.To, m.Ready.Sub(m.Began).Round(time.Millisecond), m.To, m.Held.Sub(m.Ready).Round(time.Millisecond), m.ReadyToAnswer().Round(time.Millisecond),
		m.ActionToAnswer().Round(time.Millisecond), m.NoneServing.Round(time.Millisecond), m.Seen)
}

// Taint is the taint MoveLocalPod puts on a pod's node so that it comes
// back on another.
const Taint = "eip-testenv/move-away"

// MoveLocalPod deletes the one pod of LocalApp name, whose IP is ip, with
// its node tainted so that the Deployment's new pod runs on another node,
// and measures, with the client's traffic, how the IP followed it.
func MoveLocalPod(ctx context.Context, c *testenv.Cluster, name string, ip netip.Addr) (LocalMove, error) {
	nodes, _, err := PodNodes(ctx, c, name)
	if err != nil || len(nodes) != 1 {
		return LocalMove{}, fmt.Errorf("the pod of %s: on %v: %w", name, nodes, err)
	}
	from := nodes[0]
	if err := kubectl(ctx, c, "taint", "node", from, Taint+"=:NoSchedule"); err != nil {
		return LocalMove{}, err
	}
	m, err := measureLocal(ctx, c, name, ip, from, func() error {
		return kubectl(ctx, c, "-n", AppNamespace, "delete", "pod", "-l", "app="+name, "--wait=false")
	})
	return m, errors.Join(err, kubectl(ctx, c, "taint", "node", from, Taint+":NoSchedule-"))
}

// ScaleToZero scales LocalApp name to no pod and returns how long after
// the scale ip was bound on no node.
func ScaleToZero(ctx context.Context, c *testenv.Cluster, name string, ip netip.Addr) (time.Duration, error) {
	began := time.Now()
	if err := kubectl(ctx, c, "-n", AppNamespace, "scale", "deployment/"+name, "--replicas=0"); err != nil {
		return 0, err
	}
	for {
		on, err := BoundOn(c, ip)
		if err != nil || len(on) == 0 {
			return time.Since(began), err
		}
		if err := pause(ctx); err != nil {
			return 0, fmt.Errorf("wait until %s is bound nowhere (on %v): %w", ip, on, err)
		}
	}
}

// ScaleBack scales LocalApp name, at no pod, back to one, and measures
// with the client's traffic how its IP came back.
func ScaleBack(ctx context.Context, c *testenv.Cluster, name string, ip netip.Addr) (LocalMove, error) {
	return measureLocal(ctx, c, name, ip, "", func() error {
		return kubectl(ctx, c, "-n", AppNamespace, "scale", "deployment/"+name, "--replicas=1")
	})
}

// BoundOn lists the nodes that have ip on an interface.
func BoundOn(c *testenv.Cluster, ip netip.Addr) ([]string, error) {
	var on []string
	for _, n := range c.Nodes() {
		has, err := c.NodeHasAddr(n.Name, ip)
		if err != nil {
			return nil, err
		}
		if has {
			on = append(on, n.Name)
		}
	}
	return on, nil
}

// measureLocal runs action with traffic to ip and the EndpointSlices of
// name sampled, waits until its one pod runs on a node other than from,
// the IP is held there, the old pod is gone and twenty requests were
// answered, and returns
// what happened. The traffic starts answering first unless from is "" (no
// pod to answer).
func measureLocal(ctx context.Context, c *testenv.Cluster, name string, ip netip.Addr, from string, action func() error) (LocalMove, error) {
	tr, err := StartTraffic(c, ip)
	if err != nil {
		return LocalMove{}, err
	}
	defer tr.Finish()
	if from != "" {
		if err := tr.WaitAnswering(ctx); err != nil {
			return LocalMove{}, err
		}
	}
	log := watchEndpoints(ctx, c, name)
	m := LocalMove{Began: time.Now()}
	err = action()
	for err == nil {
		var nodes []string
		var all int
		nodes, all, err = PodNodes(ctx, c, name)
		if err == nil && len(nodes) == 1 && nodes[0] != from {
			m.To = nodes[0]
			var h string
			if h, err = Holder(ctx, c, ip); h == m.To && m.Held.IsZero() {
				m.Held = time.Now()
			}
			if !m.Held.IsZero() && all == 1 {
				break
			}
		}
		if err == nil {
			err = pause(ctx)
		}
	}
	if err == nil {
		err = tr.WaitAnswered(ctx, 20)
	}
	samples := log.stop()
	if err != nil {
		return m, fmt.Errorf("wait for %s to follow the pod of %s: %w", ip, name, err)
	}
	m.Seen = tr.Finish()
	for i, s := range samples {
		if m.Ready.IsZero() && s.nodes[m.To] == endpoints.Ready {
			m.Ready = s.at
		}
		if i > 0 && !samples[i-1].serving() {
			m.NoneServing += s.at.Sub(samples[i-1].at)
		}
	}
	for _, r := range m.Seen.Requests {
		if r.Err == nil && slices.Contains(strings.Fields(r.Answer), "node="+m.To) {
			m.Answered = r.End
			break
		}
	}
	if m.Ready.IsZero() || m.Answered.IsZero() {
		return m, fmt.Errorf("%s: no sample of %s's endpoint ready on %s, or no answer from there", ip, name, m.To)
	}
	return m, nil
}

// pause waits a moment between two looks at the cluster.
func pause(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(20 * time.Millisecond):
		return nil
	}
}

// endpointSample is the readiness of a Service's nodes at a moment.
type endpointSample struct {
	at    time.Time
	nodes map[string]endpoints.Readiness
}

// serving reports whether an endpoint served on some node.
func (s endpointSample) serving() bool {
	for _, r := range s.nodes {
		if r >= endpoints.Leaving {
			return true
		}
	}
	return false
}

type endpointLog struct {
	cancel  context.CancelFunc
	done    chan struct{}
	samples []endpointSample
}

// watchEndpoints samples the EndpointSlices of Service name every 20 ms
// until stop.
func watchEndpoints(ctx context.Context, c *testenv.Cluster, name string) *endpointLog {
	ctx, cancel := context.WithCancel(ctx)
	l := &endpointLog{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for {
			list, err := c.Client().DiscoveryV1().EndpointSlices(AppNamespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + name})
			if err == nil {
				l.samples = append(l.samples, endpointSample{time.Now(), endpoints.Nodes(ptrs(list.Items))})
			}
			if pause(ctx) != nil {
				return
			}
		}
	}()
	return l
}

func (l *endpointLog) stop() []endpointSample {
	l.cancel()
	<-l.done
	return l.samples
}

func ptrs[T any](items []T) []*T {
	out := make([]*T, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}
