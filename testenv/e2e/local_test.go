package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	"gotest.tools/v3/assert"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/eip-project/eip/internal/cli"
	"github.com/eip-project/eip/internal/endpoints"
	"github.com/eip-project/eip/testenv"
	"github.com/eip-project/eip/testenv/bench"
)

// localService creates a LoadBalancer Service of another class (eip does
// not allocate for it) with externalTrafficPolicy: Local, naming ip as an
// external IP, and no selector: the test writes its EndpointSlice as the
// endpoint controller would (endpointsOn).
func (e *env) localService(name string, ip netip.Addr) {
	e.t.Helper()
	class := "example.com/other"
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: svcNamespace, Labels: map[string]string{e2eLabel: "true"}},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &class,
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			ExternalIPs:           []string{ip.String()},
			Ports:                 []corev1.ServicePort{{Name: "http", Port: 80}},
		},
	}
	_, err := e.k.CoreV1().Services(svcNamespace).Create(e.ctx, svc, metav1.CreateOptions{})
	e.must(err)
	e.t.Cleanup(func() {
		err := e.k.DiscoveryV1().EndpointSlices(svcNamespace).Delete(e.ctx, name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			e.t.Error(err)
		}
	})
}

// endpointsOn writes the EndpointSlice of Service name: one ready endpoint
// on each of ready, one terminating but still serving on each of leaving.
func (e *env) endpointsOn(name string, ready, leaving []string) {
	e.t.Helper()
	yes, no := true, false
	es := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: svcNamespace,
			Labels: map[string]string{discoveryv1.LabelServiceName: name, e2eLabel: "true"}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	add := func(nodes []string, c discoveryv1.EndpointConditions) {
		for i, n := range nodes {
			es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{
				Addresses: []string{fmt.Sprintf("10.244.%d.%d", len(es.Endpoints), i+1)}, NodeName: &n, Conditions: c})
		}
	}
	add(ready, discoveryv1.EndpointConditions{Ready: &yes, Serving: &yes, Terminating: &no})
	add(leaving, discoveryv1.EndpointConditions{Ready: &no, Serving: &yes, Terminating: &yes})
	slices := e.k.DiscoveryV1().EndpointSlices(svcNamespace)
	cur, err := slices.Get(e.ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = slices.Create(e.ctx, es, metav1.CreateOptions{})
		e.must(err)
		return
	}
	e.must(err)
	es.ResourceVersion = cur.ResourceVersion
	_, err = slices.Update(e.ctx, es, metav1.UpdateOptions{})
	e.must(err)
}

// statusRow is the row of ip in `kubectl eip status -o json`.
func (e *env) statusRow(ip netip.Addr) cli.IP {
	e.t.Helper()
	for _, r := range e.statusJSON().IPs {
		if r.IP == ip.String() {
			return r
		}
	}
	e.t.Fatalf("no status row for %s", ip)
	return cli.IP{}
}

// An IP of a Service with externalTrafficPolicy: Local lives on the node
// of its ready endpoint, whichever node ranks first for it: the node that
// binds it and whose MAC answers is that one. When the endpoint moves (a
// rolling update: the old one terminating but still serving), the IP goes
// to the new one's node by hand-off. With no ready endpoint anywhere it is
// bound nowhere, status says no-endpoints and a Warning says why; an
// endpoint back brings it back, with a Normal Event.
func TestLocalIPLivesWhereItsEndpointIs(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	ip := testenv.ServiceIP(60)
	e.localService("local-web", ip)
	first := e.nodes[len(e.nodes)-1]
	e.endpointsOn("local-web", []string{first}, nil)
	assert.Equal(t, e.served(ip), first)
	row := e.statusRow(ip)
	assert.Equal(t, row.State, cli.StateBound)
	assert.Equal(t, row.Reason, "externalTrafficPolicy: Local; ready endpoints on "+first)

	next := e.nodes[0]
	e.endpointsOn("local-web", []string{next}, []string{first})
	e.eventually(ip.String()+" handed to "+next, func() (bool, string) {
		return e.holder(ip) == next, "holder " + e.holder(ip)
	})
	assert.Equal(t, e.served(ip), next)

	began := time.Now()
	e.endpointsOn("local-web", nil, nil)
	e.eventually(ip.String()+" bound nowhere", func() (bool, string) {
		on := e.boundOn(ip)
		return len(on) == 0 && e.holder(ip) == "", fmt.Sprintf("holder %q, bound on %v", e.holder(ip), on)
	})
	e.warningSince("Service", "local-web", "NoEndpoints", began, ip.String()+" is not bound", "no node has a ready endpoint of default/local-web")
	row = e.statusRow(ip)
	assert.Equal(t, row.State, cli.StateNoEndpoints)
	assert.Equal(t, row.Reason, "no node has a ready endpoint of default/local-web (externalTrafficPolicy: Local)")

	back := e.nodes[1]
	e.endpointsOn("local-web", []string{back}, nil)
	assert.Equal(t, e.served(ip), back)
	e.eventMessage("local-web", "EndpointsReady", ip.String()+" may be bound again")
	assert.Assert(t, !slices.Contains(e.boundOn(ip), first))
}

// An IP that several Services share lives only on a node where every Local
// one of them has a ready endpoint; a Cluster Service sharing it adds no
// condition. With no node ready for both Local Services, and none where
// both still serve, it is bound nowhere and status says no-endpoints; a
// node that becomes ready for both takes it.
func TestLocalSharedIPNeedsEveryLocalService(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	ip := testenv.ServiceIP(61)
	n := e.nodes
	e.localService("shared-web", ip)
	e.localService("shared-api", ip)
	e.service("shared-cluster", ip)
	e.endpointsOn("shared-web", []string{n[0], n[1]}, nil)
	e.endpointsOn("shared-api", []string{n[1], n[2]}, nil)
	assert.Equal(t, e.served(ip), n[1])

	e.endpointsOn("shared-api", []string{n[2]}, nil)
	e.eventually(ip.String()+" bound nowhere", func() (bool, string) {
		on := e.boundOn(ip)
		return len(on) == 0 && e.holder(ip) == "", fmt.Sprintf("holder %q, bound on %v", e.holder(ip), on)
	})
	assert.Equal(t, e.statusRow(ip).State, cli.StateNoEndpoints)

	e.endpointsOn("shared-api", []string{n[0]}, nil)
	assert.Equal(t, e.served(ip), n[0])
}

// eipd watches every EndpointSlice of the cluster only while a Service
// with externalTrafficPolicy: Local has an eip IP, as the API server's
// audit log of eipd's requests shows: no such watch open while Cluster
// Services alone have IPs, one per eipd once a Local Service has one (and
// that IP lives where its endpoint is), none again a grace after the
// Service is switched to Cluster, and after it is deleted. (The API
// server's count of open watches, apiserver_longrunning_requests, counts
// one of its own besides eipd's.)
func TestLocalEndpointSlicesWatchedOnlyWhileNeeded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	w := &auditedWatches{open: map[string]bool{}}
	e.service("cluster-web", testenv.ServiceIP(61))
	e.served(testenv.ServiceIP(61))
	e.sliceWatches(w, 0, settle)

	ip := testenv.ServiceIP(62)
	e.localService("local-web", ip)
	e.endpointsOn("local-web", []string{e.nodes[1]}, nil)
	e.sliceWatches(w, len(e.nodes), settle)
	assert.Equal(t, e.served(ip), e.nodes[1])

	e.setTrafficPolicy("local-web", corev1.ServiceExternalTrafficPolicyCluster)
	e.sliceWatches(w, 0, endpoints.WatchGrace+settle)

	e.setTrafficPolicy("local-web", corev1.ServiceExternalTrafficPolicyLocal)
	e.endpointsOn("local-web", []string{e.nodes[2]}, nil)
	e.sliceWatches(w, len(e.nodes), settle)
	assert.Equal(t, e.served(ip), e.nodes[2])

	e.deleteService("local-web")
	e.sliceWatches(w, 0, endpoints.WatchGrace+settle)
}

// auditedWatches are eipd's cluster-wide watches of EndpointSlices open
// as of the audit log read up to offset (each by its audit ID).
type auditedWatches struct {
	offset int64
	open   map[string]bool
}

// sliceWatches waits, at most within, until eipd has n cluster-wide
// watches of EndpointSlices open, as the audit log tells: begun
// (ResponseStarted) and not ended (ResponseComplete).
func (e *env) sliceWatches(w *auditedWatches, n int, within time.Duration) {
	e.t.Helper()
	testenv.Eventually(e.t, within, func() (bool, string) {
		f, err := os.Open(e.c.AuditLog())
		e.must(err)
		defer f.Close()
		_, err = f.Seek(w.offset, io.SeekStart)
		e.must(err)
		r := bufio.NewReader(f)
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				break // a line not yet whole is read again next time
			}
			w.offset += int64(len(line))
			var ev auditEvent
			e.must(json.Unmarshal(line, &ev))
			if ev.Verb != "watch" || ev.ObjectRef == nil || ev.ObjectRef.Resource != "endpointslices" || ev.ObjectRef.Namespace != "" {
				continue
			}
			w.open[ev.AuditID] = ev.Stage == "ResponseStarted"
			if !w.open[ev.AuditID] {
				delete(w.open, ev.AuditID)
			}
		}
		return len(w.open) == n, fmt.Sprintf("want %d of eipd's watches of every EndpointSlice open, the audit log shows %d", n, len(w.open))
	})
}

// setTrafficPolicy sets the externalTrafficPolicy of Service name.
func (e *env) setTrafficPolicy(name string, p corev1.ServiceExternalTrafficPolicy) {
	e.t.Helper()
	svc := e.getService(name)
	svc.Spec.ExternalTrafficPolicy = p
	if p != corev1.ServiceExternalTrafficPolicyLocal {
		svc.Spec.HealthCheckNodePort = 0
	}
	_, err := e.k.CoreV1().Services(svcNamespace).Update(e.ctx, svc, metav1.UpdateOptions{})
	e.must(err)
}

// A thousand Services with an EndpointSlice each, their endpoints spread
// over the nodes: with externalTrafficPolicy Local every IP is bound on
// its endpoint's node, with Cluster on any one node. It logs each eipd's
// memory and CPU once all are bound, and over a quiet window after: the
// cost of watching every EndpointSlice (figures, not assertions).
func TestLocalThousandServices(t *testing.T) {
	// Runs alone (no t.Parallel): it creates 2,000 objects at once and logs
	// eipd's CPU over a quiet window, figures that other tests' load would
	// distort, while its own load would slow their failovers.
	const n = 1000
	for _, policy := range []corev1.ServiceExternalTrafficPolicy{corev1.ServiceExternalTrafficPolicyCluster, corev1.ServiceExternalTrafficPolicyLocal} {
		t.Run(string(policy), func(t *testing.T) {
			cfg := defaultConfig()
			cfg["ranges"] = "198.18.100.0/22"
			e := newEnv(t, cfg)
			t.Cleanup(func() {
				e.must(e.k.DiscoveryV1().EndpointSlices(svcNamespace).DeleteCollection(e.ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: e2eLabel}))
			})
			cpu0 := e.daemonsCPU()
			began := time.Now()
			want := map[netip.Addr]string{}
			g, ctx := errgroup.WithContext(e.ctx)
			g.SetLimit(8)
			for i := 1; i <= n; i++ {
				ip, node := testenv.ServiceIP(i), e.nodes[i%len(e.nodes)]
				want[ip] = node
				name := fmt.Sprintf("many-%d", i)
				g.Go(func() error {
					class := "example.com/other"
					svc := &corev1.Service{
						ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: svcNamespace, Labels: map[string]string{e2eLabel: "true"}},
						Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &class, ExternalTrafficPolicy: policy,
							ExternalIPs: []string{ip.String()}, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
					}
					if _, err := e.k.CoreV1().Services(svcNamespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
						return err
					}
					_, err := e.k.DiscoveryV1().EndpointSlices(svcNamespace).Create(ctx, readySlice(name, node), metav1.CreateOptions{})
					return err
				})
			}
			e.must(g.Wait())
			e.eventually(fmt.Sprintf("%d IPs held", n), func() (bool, string) {
				held, wrong := e.locks(), 0
				for ip, node := range want {
					if h := held[ip]; h == "" || policy == corev1.ServiceExternalTrafficPolicyLocal && h != node {
						wrong++
					}
				}
				return wrong == 0, fmt.Sprintf("%d not held where they should be", wrong)
			})
			e.eventually(fmt.Sprintf("each of the %d IPs bound on one node", n), func() (bool, string) {
				on := map[netip.Addr][]string{}
				for _, node := range e.nodes {
					for _, p := range e.testAddrs(node) {
						on[p.Addr()] = append(on[p.Addr()], node)
					}
				}
				var wrong []string
				for ip, nodes := range on {
					if _, ok := want[ip]; !ok || len(nodes) != 1 {
						wrong = append(wrong, fmt.Sprintf("%s on %v", ip, nodes))
					}
				}
				for ip := range want {
					if len(on[ip]) == 0 {
						wrong = append(wrong, ip.String()+" on no node")
					}
				}
				slices.Sort(wrong)
				return len(wrong) == 0, fmt.Sprintf("%d wrong, first %v", len(wrong), wrong[:min(len(wrong), 5)])
			})
			t.Logf("%d Services (%s) and their EndpointSlices created and bound in %s", n, policy, time.Since(began).Round(100*time.Millisecond))
			cpu1 := e.daemonsCPU()
			const window = 10 * time.Second // a measurement window, not a wait for a condition
			<-time.After(window)
			cpu2 := e.daemonsCPU()
			for _, node := range e.nodes {
				s, err := bench.ReadProc(e.c.DaemonPID(node))
				e.must(err)
				t.Logf("%s eipd: RSS %.1f MiB (peak %.1f MiB), CPU %s for the cold start, %.2f %% of a core over %s after",
					node, float64(s.RSS)/(1<<20), float64(s.PeakRSS)/(1<<20), (cpu1[node] - cpu0[node]).Round(time.Millisecond),
					100*float64(cpu2[node]-cpu1[node])/float64(window), window)
			}
			if policy == corev1.ServiceExternalTrafficPolicyLocal {
				for i := 1; i <= 5; i++ {
					e.moveEndpoint(fmt.Sprintf("many-%d", i), testenv.ServiceIP(i), e.nodes[(i+1)%len(e.nodes)])
				}
			}
		})
	}
}

// moveEndpoint makes the one ready endpoint of Service name's slice be on
// node instead, as when its pod comes back ready there, and logs how long
// the client then waited for a reply to its pings of ip from node (a
// figure, not an assertion; the wait for it is one).
func (e *env) moveEndpoint(name string, ip netip.Addr, node string) {
	e.t.Helper()
	p := e.probe(ip)
	e.answersFrom(p, e.holder(ip))
	cur, err := e.k.DiscoveryV1().EndpointSlices(svcNamespace).Get(e.ctx, name, metav1.GetOptions{})
	e.must(err)
	moved := readySlice(name, node)
	moved.ResourceVersion = cur.ResourceVersion
	ready := time.Now()
	_, err = e.k.DiscoveryV1().EndpointSlices(svcNamespace).Update(e.ctx, moved, metav1.UpdateOptions{})
	e.must(err)
	e.answersFrom(p, node)
	want := e.mac(node)
	for _, r := range p.Result().Replies {
		if r.At.After(ready) && bytes.Equal(r.MAC, want) {
			e.t.Logf("%s: endpoint ready on %s → %s answers from there after %s", name, node, ip, r.At.Sub(ready).Round(time.Millisecond))
			return
		}
	}
}

// readySlice is the EndpointSlice of Service name with one ready endpoint
// on node.
func readySlice(name, node string) *discoveryv1.EndpointSlice {
	yes := true
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: svcNamespace,
			Labels: map[string]string{discoveryv1.LabelServiceName: name, e2eLabel: "true"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.244.0.1"}, NodeName: &node, Conditions: discoveryv1.EndpointConditions{Ready: &yes}}},
	}
}

// daemonsCPU is the CPU time each node's eipd used so far.
func (e *env) daemonsCPU() map[string]time.Duration {
	e.t.Helper()
	out := map[string]time.Duration{}
	for _, node := range e.nodes {
		s, err := bench.ReadProc(e.c.DaemonPID(node))
		e.must(err)
		out[node] = s.CPU
	}
	return out
}

// (f) Route mode follows the same rule: the router's only path for an
// eTP=Local Service's IP in a BGP range is from the node of its ready
// endpoint, whichever node ranks first; it moves with the endpoint, and
// with no endpoint anywhere no node announces the IP.
func TestLocalRouteModeAnnouncesOnlyWhereEndpointIs(t *testing.T) {
	t.Parallel()
	e := newRouteEnv(t)
	ip := testenv.RoutedServiceIP(70)
	e.localService("local-routed", ip)
	for _, n := range []string{e.nodes[len(e.nodes)-1], e.nodes[0]} {
		e.endpointsOn("local-routed", []string{n}, nil)
		e.eventually(ip.String()+" announced by "+n+" alone", func() (bool, string) {
			paths, err := e.c.BGPPaths(e.ctx, ip)
			if err != nil {
				return false, err.Error()
			}
			return len(paths) == 1 && e.bestPathAt(ip, n) == "", fmt.Sprintf("paths %+v", paths)
		})
		assert.Equal(t, e.routed(ip), n)
	}
	e.endpointsOn("local-routed", nil, nil)
	e.eventually(ip.String()+" announced by no node", func() (bool, string) {
		// birdc fails on a prefix it has no route for: the whole table
		// says it.
		table, err := e.c.Birdc(e.ctx, "show", "route")
		prefix := netip.PrefixFrom(ip, ip.BitLen()).String()
		return err == nil && !strings.Contains(table, prefix) && len(e.boundOn(ip)) == 0,
			fmt.Sprintf("bound on %v; the router's table (%v):\n%s", e.boundOn(ip), err, table)
	})
}
