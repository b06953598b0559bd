package agent

import (
	"context"
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"

	"github.com/eip-project/eip/internal/endpoints"
)

// addLocalService adds a Service with externalTrafficPolicy: Local naming
// ips as external IPs.
func (w *world) addLocalService(name string, ips ...netip.Addr) {
	w.addService(name, ips...)
	svc := w.svcObj(name)
	svc.Spec.Type = corev1.ServiceTypeLoadBalancer
	svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	svc.ResourceVersion = w.nextRV()
	w.putService(svc)
}

// endpointsOf sets the one EndpointSlice of Service name in default: an
// endpoint per node, with its readiness. The loop sees the change as an
// informer would tell it (epKick), and passes over what it changed.
func (w *world) endpointsOf(name string, nodes map[string]endpoints.Readiness) {
	es := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name + "-1", ResourceVersion: w.nextRV(),
			Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	yes, no := true, false
	for node, r := range nodes {
		ep := discoveryv1.Endpoint{Addresses: []string{"10.0.0.1"}, NodeName: &node}
		switch r {
		case endpoints.Ready:
			ep.Conditions = discoveryv1.EndpointConditions{Ready: &yes, Serving: &yes, Terminating: &no}
		case endpoints.Leaving:
			ep.Conditions = discoveryv1.EndpointConditions{Ready: &no, Serving: &yes, Terminating: &yes}
		default:
			ep.Conditions = discoveryv1.EndpointConditions{Ready: &no, Serving: &no, Terminating: &no}
		}
		es.Endpoints = append(es.Endpoints, ep)
	}
	w.must(w.eps.Update(es))
	w.s.sched.dirtyEps = true
	w.s.pass()
	w.settle()
}

// events are the Events recorded since the last call.
func (w *world) events() []string {
	var out []string
	ch := w.a.recorder.(*record.FakeRecorder).Events
	for {
		select {
		case e := <-ch:
			out = append(out, e)
		default:
			return out
		}
	}
}

// localWorld is node-a with live peer node-b, and a Local Service whose
// one endpoint is on node-b: node-a, though it ranks first, leaves the IP
// to node-b.
func localWorld(t *testing.T) *world {
	w := newWorld(t, "node-a", defaultTestConfig())
	w.addNode("node-b")
	w.heartbeat("node-b", true)
	w.addLocalService("web", testIP(0))
	w.endpointsOf("web", map[string]endpoints.Readiness{"node-b": endpoints.Ready})
	w.pass()
	for range 4 {
		w.tick("node-b")
	}
	assert.DeepEqual(t, w.take(), []string(nil))
	return w
}

// An IP of an eTP=Local Service lives where its endpoint is: the node
// with none never races for it; when the endpoint comes here it takes the
// IP (node-b, which lost its endpoint, hands it here); when it leaves
// again this node hands the IP to the node that has one, unbinding first.
func TestLoopLocalIPLivesWhereItsEndpointIs(t *testing.T) {
	w := localWorld(t)
	w.lock(testIP(0), "node-b")
	w.endpointsOf("web", map[string]endpoints.Readiness{"node-a": endpoints.Ready})
	// node-b holds it and is alive: it is node-b's to give.
	assert.DeepEqual(t, w.take(), []string(nil))
	w.lock(testIP(0), "node-a") // node-b's hand-off
	w.tick("node-b")
	assert.DeepEqual(t, w.take(), []string{"bind 198.18.100.1"})

	w.endpointsOf("web", map[string]endpoints.Readiness{"node-b": endpoints.Ready})
	assert.DeepEqual(t, w.take(), []string{"unbind 198.18.100.1", "update eip-198-18-100-1 holder=node-b"})
}

// holdingLocalWorld is node-a, with kp for kube-proxy, and live peer
// node-b, each with an address, and a Local Service whose one endpoint
// is on node-a: node-a holds its IP.
func holdingLocalWorld(t *testing.T, kp KubeProxy) *world {
	w := newWorld(t, "node-a", defaultTestConfig())
	w.a.opt.KubeProxy, w.s.serving.in.kubeProxy = kp, kp
	for i, n := range []string{"node-a", "node-b"} {
		if n != "node-a" {
			w.addNode(n)
		}
		node := w.nodeObj(n)
		node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("198.18.0.%d", 10+i)}}
		w.must(w.nodes.Update(node))
	}
	w.heartbeat("node-b", true)
	w.addLocalService("web", testIP(0))
	svc := w.svcObj("web")
	svc.Spec.HealthCheckNodePort = 31000
	w.putService(svc)
	w.endpointsOf("web", map[string]endpoints.Readiness{"node-a": endpoints.Ready})
	for range 4 {
		w.tick("node-b")
	}
	assert.DeepEqual(t, w.take(), []string{"create eip-198-18-100-1 holder=node-a", "bind 198.18.100.1"})
	return w
}

// A rolling update: while the endpoint here is terminating but serving
// and no node has a ready one, the IP stays; once another node has a
// ready one it goes there, before the old pod stops serving.
func TestLoopLocalIPMovesBeforeItsPodStopsServing(t *testing.T) {
	w := holdingLocalWorld(t, nil)
	w.endpointsOf("web", map[string]endpoints.Readiness{"node-a": endpoints.Leaving, "node-b": endpoints.None})
	w.tick("node-b")
	// Only a terminating endpoint serves, here: the IP stays.
	assert.DeepEqual(t, w.take(), []string(nil))

	w.endpointsOf("web", map[string]endpoints.Readiness{"node-a": endpoints.Leaving, "node-b": endpoints.Ready})
	assert.DeepEqual(t, w.take(), []string{"unbind 198.18.100.1", "update eip-198-18-100-1 holder=node-b"})
}

// With no ready endpoint anywhere the holder releases the IP, unbound,
// with a Warning; when one is ready here again it takes it back, with a
// Normal Event.
func TestLoopLocalIPWithoutEndpointsIsNotBound(t *testing.T) {
	w := newWorld(t, "node-a", defaultTestConfig())
	w.addLocalService("web", testIP(0))
	w.endpointsOf("web", map[string]endpoints.Readiness{"node-a": endpoints.Ready})
	for range 4 {
		w.tick()
	}
	assert.DeepEqual(t, w.take(), []string{"create eip-198-18-100-1 holder=node-a", "bind 198.18.100.1"})
	w.events()

	w.endpointsOf("web", map[string]endpoints.Readiness{"node-a": endpoints.None})
	assert.DeepEqual(t, w.take(), []string{"unbind 198.18.100.1", "update eip-198-18-100-1 holder="})
	for range 10 {
		w.tick()
	}
	assert.DeepEqual(t, w.take(), []string(nil))
	assert.DeepEqual(t, w.events(), []string{"Warning NoEndpoints 198.18.100.1 is not bound: no node has a ready endpoint of default/web (externalTrafficPolicy: Local)"})

	w.endpointsOf("web", map[string]endpoints.Readiness{"node-a": endpoints.Ready})
	for range 4 {
		w.tick()
	}
	assert.DeepEqual(t, w.take(), []string{"update eip-198-18-100-1 holder=node-a", "bind 198.18.100.1"})
	got := strings.Join(w.events(), "\n")
	assert.Assert(t, strings.Contains(got, "Normal EndpointsReady 198.18.100.1 may be bound again: externalTrafficPolicy: Local; ready endpoints on node-a"), got)
}

// The cache keeps of an EndpointSlice one endpoint per node with its best
// readiness, and nothing of its addresses or ports; the kubernetes
// Service's keep their addresses.
func TestKeepOfSlice(t *testing.T) {
	w := newWorld(t, "node-a", defaultTestConfig())
	w.endpointsOf("web", map[string]endpoints.Readiness{"node-a": endpoints.Leaving, "node-b": endpoints.Ready})
	obj, ok, _ := w.eps.GetByKey("default/web-1")
	assert.Assert(t, ok)
	es := obj.(*discoveryv1.EndpointSlice)
	assert.DeepEqual(t, es.Labels, map[string]string{discoveryv1.LabelServiceName: "web"})
	assert.Equal(t, len(es.Endpoints), 2)
	assert.Equal(t, *es.Endpoints[0].NodeName, "node-a")
	assert.Equal(t, endpoints.Of(es.Endpoints[0].Conditions), endpoints.Leaving)
	assert.Equal(t, endpoints.Of(es.Endpoints[1].Conditions), endpoints.Ready)
	assert.Assert(t, es.Endpoints[0].Addresses == nil && es.Ports == nil)
}

// An IP two Local Services share lives only where both have a ready
// endpoint: with their endpoints on different nodes it is bound nowhere;
// once one node has both, that node takes it.
func TestLoopSharedLocalIPNeedsEveryServiceReady(t *testing.T) {
	w := newWorld(t, "node-a", defaultTestConfig())
	w.addNode("node-b")
	w.heartbeat("node-b", true)
	w.addLocalService("web", testIP(0))
	w.addLocalService("api", testIP(0))
	w.endpointsOf("web", map[string]endpoints.Readiness{"node-a": endpoints.Ready})
	w.endpointsOf("api", map[string]endpoints.Readiness{"node-b": endpoints.Ready})
	w.pass()
	for range 10 {
		w.tick("node-b")
	}
	assert.DeepEqual(t, w.take(), []string(nil))

	w.endpointsOf("api", map[string]endpoints.Readiness{"node-a": endpoints.Ready, "node-b": endpoints.Ready})
	for range 4 {
		w.tick("node-b")
	}
	assert.DeepEqual(t, w.take(), []string{"create eip-198-18-100-1 holder=node-a", "bind 198.18.100.1"})
}

// fakeKubeProxy is kube-proxy's health check as the loop's checks see it:
// each check tells its address on asked and waits for its verdict on
// answer.
type fakeKubeProxy struct {
	asked  chan netip.AddrPort
	answer chan endpoints.Verdict
}

func (k fakeKubeProxy) Check(ctx context.Context, addr netip.AddrPort) endpoints.Verdict {
	k.asked <- addr
	select {
	case v := <-k.answer:
		return v
	case <-ctx.Done():
		return endpoints.Unknown
	}
}

// kubeProxySays answers the check the loop made of kube-proxy at addr
// with v, and hands the loop the verdict.
func (w *world) kubeProxySays(kp fakeKubeProxy, addr string, v endpoints.Verdict) {
	w.t.Helper()
	select {
	case got := <-kp.asked:
		assert.Equal(w.t, got, netip.MustParseAddrPort(addr))
	case <-time.After(10 * time.Second):
		w.t.Fatalf("kube-proxy at %s was not asked", addr)
	}
	kp.answer <- v
	w.s.handle(inProxied, reflect.ValueOf(<-w.s.serving.proxied), false)
	w.pass()
}

// A rolling update of one replica moving from node-a to node-b: the IP
// stays on node-a, whose pod still serves, until kube-proxy on node-b
// says it delivers to its new pod; not as soon as the EndpointSlice says
// the pod is ready, as kube-proxy's rules lag that by up to a second.
// Then back.
func TestLoopLocalIPWaitsForKubeProxyOnTheNewNode(t *testing.T) {
	kp := fakeKubeProxy{asked: make(chan netip.AddrPort, 4), answer: make(chan endpoints.Verdict)}
	// node-a asks not its own kube-proxy: it takes what it is given.
	w := holdingLocalWorld(t, kp)

	w.events()
	w.endpointsOf("web", map[string]endpoints.Readiness{"node-a": endpoints.Leaving, "node-b": endpoints.Ready})
	w.tick("node-b")
	// node-a keeps it bound: node-b may not hold it yet, nor succeed.
	assert.DeepEqual(t, w.take(), []string(nil))
	w.tick("node-b")
	assert.DeepEqual(t, w.events(), []string{"Normal WaitingForKubeProxy 198.18.100.1 stays on node-a, where endpoints of default/web still serve, until kube-proxy on node-b delivers to the ready ones there"})

	w.step(700 * time.Millisecond)
	w.kubeProxySays(kp, "198.18.0.11:31000", endpoints.Delivers)
	assert.DeepEqual(t, w.take(), []string{"unbind 198.18.100.1", "update eip-198-18-100-1 holder=node-b"})
	assert.DeepEqual(t, w.events(), []string{"Normal KubeProxyDelivers kube-proxy on node-b delivers to default/web after 1.7s: 198.18.100.1 moves there",
		"Normal Moved 198.18.100.1 handed from node-a to node-b"})

	// Back again: node-b, whose pod is terminating, hands the IP here once
	// its kube-proxy check of node-a says so; node-a, which never waits
	// for its own, binds it at once, though node-c (without an address
	// to ask, so judged by its EndpointSlice) may hold it too.
	w.addNode("node-c")
	w.heartbeat("node-c", true)
	w.endpointsOf("web", map[string]endpoints.Readiness{"node-a": endpoints.Ready, "node-b": endpoints.Leaving, "node-c": endpoints.Ready})
	w.lock(testIP(0), "node-a")
	w.tick("node-b", "node-c")
	assert.DeepEqual(t, w.take(), []string{"bind 198.18.100.1"})
}

// A holder cordoned while its pod, evicted, still serves, and the pod
// that replaces it is ready on node-b (a drain of one replica): node-a
// may no longer hold the IP, yet it keeps it until kube-proxy on node-b
// says it delivers, as a holder whose pod stops serving does; then it
// hands it there.
func TestLoopCordonedHolderWaitsForKubeProxyOnTheNewNode(t *testing.T) {
	kp := fakeKubeProxy{asked: make(chan netip.AddrPort, 4), answer: make(chan endpoints.Verdict)}
	w := holdingLocalWorld(t, kp)
	n := w.nodeObj("node-a")
	n.Spec.Unschedulable = true
	n.ResourceVersion = w.nextRV()
	w.must(w.nodes.Update(n))
	w.s.sched.dirtyNodes = true
	w.endpointsOf("web", map[string]endpoints.Readiness{"node-a": endpoints.Leaving, "node-b": endpoints.Ready})
	for range 4 {
		w.tick("node-b")
	}
	assert.DeepEqual(t, w.take(), []string(nil))

	w.kubeProxySays(kp, "198.18.0.11:31000", endpoints.Delivers)
	assert.DeepEqual(t, w.take(), []string{"unbind 198.18.100.1", "update eip-198-18-100-1 holder=node-b"})
}

// A wait for kube-proxy that ends without its word (it never delivered
// within its time, or could not be asked) says so in a Warning, and the
// IP moves on the EndpointSlices' word; one that ends because the
// endpoints changed says why.
func TestLoopWaitForKubeProxyEndsWithAnEvent(t *testing.T) {
	kp := fakeKubeProxy{asked: make(chan netip.AddrPort, 4), answer: make(chan endpoints.Verdict)}
	w := holdingLocalWorld(t, kp)
	w.events()
	w.endpointsOf("web", map[string]endpoints.Readiness{"node-a": endpoints.Leaving, "node-b": endpoints.Ready})
	assert.Equal(t, len(w.events()), 1)
	w.kubeProxySays(kp, "198.18.0.11:31000", endpoints.Unknown)
	assert.DeepEqual(t, w.take(), []string{"unbind 198.18.100.1", "update eip-198-18-100-1 holder=node-b"})
	assert.DeepEqual(t, w.events(), []string{"Warning KubeProxyUnverified kube-proxy on node-b did not say it delivers to default/web within 0s, or could not be asked: 198.18.100.1 moves there on its EndpointSlices' word",
		"Normal Moved 198.18.100.1 handed from node-a to node-b"})

	w = holdingLocalWorld(t, kp)
	w.events()
	w.endpointsOf("web", map[string]endpoints.Readiness{"node-a": endpoints.Leaving, "node-b": endpoints.Ready})
	assert.Equal(t, len(w.events()), 1)
	w.endpointsOf("web", map[string]endpoints.Readiness{"node-a": endpoints.Ready})
	assert.DeepEqual(t, w.take(), []string(nil))
	assert.DeepEqual(t, w.events(), []string{"Normal KubeProxyWaitEnded 198.18.100.1 waits for kube-proxy no more after 0s: externalTrafficPolicy: Local; ready endpoints on node-a"})
	<-kp.asked // the check of node-b, forgotten
}

// localWorldOf3 is node-a beside node-b and node-c, each with an address
// its kube-proxy is asked at, and the Local Service web on the first test
// IP, with its health check node port; node-b holds the IP.
func localWorldOf3(t *testing.T, kp KubeProxy) *world {
	w := newWorld(t, "node-a", defaultTestConfig())
	w.a.opt.KubeProxy, w.s.serving.in.kubeProxy = kp, kp
	for i, n := range []string{"node-a", "node-b", "node-c"} {
		if n != "node-a" {
			w.addNode(n)
			w.heartbeat(n, true)
		}
		node := w.nodeObj(n)
		node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("198.18.0.%d", 10+i)}}
		w.must(w.nodes.Update(node))
	}
	w.addLocalService("web", testIP(0))
	svc := w.svcObj("web")
	svc.Spec.HealthCheckNodePort = 31000
	w.putService(svc)
	return w
}

// kubeProxyChecks is how many kube-proxy checks run and wait.
func (w *world) kubeProxyChecks() (running, waiting int) {
	if w.s.serving.runner == nil {
		return 0, 0
	}
	return w.s.serving.runner.InFlight()
}

// Only the holder of an IP and its successor ask kube-proxy: node-a,
// neither, begins no check of node-b's or node-c's; named successor, it
// checks the node it would hand to.
func TestLoopOnlyHolderAndSuccessorAskKubeProxy(t *testing.T) {
	kp := fakeKubeProxy{asked: make(chan netip.AddrPort, 4), answer: make(chan endpoints.Verdict)}
	w := localWorldOf3(t, kp)
	w.lockNaming(testIP(0), "node-b", "node-c")
	w.endpointsOf("web", map[string]endpoints.Readiness{"node-b": endpoints.Ready, "node-c": endpoints.Ready})
	w.tick("node-b", "node-c")
	running, waiting := w.kubeProxyChecks()
	assert.Equal(t, running+waiting, 0, "node-a is neither holder nor successor")

	w.lockNaming(testIP(0), "node-b", "node-a")
	w.endpointsOf("web", map[string]endpoints.Readiness{"node-b": endpoints.Ready, "node-c": endpoints.Ready})
	w.tick("node-b", "node-c")
	running, waiting = w.kubeProxyChecks()
	assert.Equal(t, running+waiting, 2, "node-a, the successor, checks node-b and node-c")
	asked := map[netip.AddrPort]bool{<-kp.asked: true, <-kp.asked: true}
	assert.DeepEqual(t, asked, map[netip.AddrPort]bool{
		netip.MustParseAddrPort("198.18.0.11:31000"): true, netip.MustParseAddrPort("198.18.0.12:31000"): true,
	})
}

// A check whose node is no longer ready is swept, and cancelled: its slot
// is free at once, and kube-proxy there is asked no longer.
func TestLoopSweptKubeProxyCheckIsCancelled(t *testing.T) {
	kp := fakeKubeProxy{asked: make(chan netip.AddrPort, 4), answer: make(chan endpoints.Verdict)}
	w := holdingLocalWorld(t, kp)
	w.endpointsOf("web", map[string]endpoints.Readiness{"node-a": endpoints.Leaving, "node-b": endpoints.Ready})
	assert.Equal(t, <-kp.asked, netip.MustParseAddrPort("198.18.0.11:31000"))
	running, _ := w.kubeProxyChecks()
	assert.Equal(t, running, 1)
	w.endpointsOf("web", map[string]endpoints.Readiness{"node-a": endpoints.Ready})
	running, waiting := w.kubeProxyChecks()
	assert.Equal(t, running+waiting, 0, "node-b's check, swept, is cancelled")
}

// A Node whose address is loopback or link-local (a cloud's metadata
// service) is not asked from the host network: it is judged on its
// EndpointSlices' word. A node's own address is.
func TestLoopKubeProxyNotAskedAtAnAddressNoNodeHas(t *testing.T) {
	for addr, want := range map[string]int{"127.0.0.1": 0, "169.254.169.254": 0, "::1": 0, "fe80::1": 0, "198.18.0.12": 1} {
		kp := fakeKubeProxy{asked: make(chan netip.AddrPort, 4), answer: make(chan endpoints.Verdict)}
		w := localWorldOf3(t, kp)
		node := w.nodeObj("node-c")
		node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: addr}}
		node.ResourceVersion = w.nextRV()
		w.must(w.nodes.Update(node))
		w.lockNaming(testIP(0), "node-a", "node-b")
		w.endpointsOf("web", map[string]endpoints.Readiness{"node-c": endpoints.Ready})
		w.tick("node-b", "node-c")
		running, waiting := w.kubeProxyChecks()
		assert.Equal(t, running+waiting, want, addr)
	}
}
