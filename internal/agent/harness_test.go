package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/eip-project/eip/internal/ipset"
	"github.com/eip-project/eip/internal/kubeclient/clientset"
	"github.com/eip-project/eip/internal/lanlive"
	"github.com/eip-project/eip/internal/lease"
	"github.com/eip-project/eip/internal/netif"
)

// world is a loop-level harness for one node's owner loop: informer caches
// that the test fills, a fake clock, a fake API server for Leases and a
// fake interface. The loop's steps run synchronously (pass, then the writes
// and the renewal it asked for), so every scenario is deterministic. Every
// API write and address change is logged in order; a test takes the log
// and compares it whole, so an unexpected call fails it.
type world struct {
	t   testing.TB
	clk *clocktesting.FakeClock
	a   *Agent
	s   *state
	// lanSession and lanSeq stand for the liveness socket (arrive).
	lanSession *lanlive.Session
	lanSeq     uint64

	svcs, nodes, leases, cms, eps cache.Indexer
	rv                            int
	addrs                         map[netip.Prefix]string // bound prefix → iface
	filter                        fakePortFilter
	calls                         []string
	askErr                        error // what Ask returns
	renewals                      []string
	// renewTries are the renewals the loop asked for, failed ones too:
	// when, and with which timeout.
	renewTries []string
	refreshes  int
	// arpIgnored: the kernel does not answer ARP for another device's
	// addresses (Links.AnswersARP), so IPv4 goes on the interface.
	arpIgnored bool
	// deviceGone: this device of eipd's was deleted (Devices.Ensure).
	deviceGone string
	// failAdd: Add fails.
	failAdd bool
	// apiDown: every Lease request fails, as when the API server is down.
	apiDown bool
	// watchLag: the watch has not delivered this node's own renewals yet,
	// as on a loaded API server: the loop still sees the heartbeat it last
	// observed.
	watchLag bool
	// lockLag: the watch has not delivered this node's lock creates yet,
	// as on a loaded API server: the API server holds them (lagged), the
	// cache does not until deliverLocks.
	lockLag bool
	lagged  []*coordinationv1.Lease
	// afterListing runs once the Leases were next listed.
	afterListing func()
	// lockTimeouts: that many lock writes more fail as a request that the
	// API server did not answer in time.
	lockTimeouts int
	// lockLatency: the API server answers each lock write this late. One
	// answered no sooner than its timeout is still carried out, but its
	// writer sees the timeout.
	lockLatency time.Duration
	// sendTakes: each probe and bind takes this long on the loop's clock,
	// as thousands do one after the other on a loaded machine.
	sendTakes time.Duration
	// inFlight: how many lock writes were in flight together, each time
	// settle answered some.
	inFlight []int
	// hung is how long the loop was quiet when the watchdog fired.
	hung time.Duration
	// sliceWatches are the contexts of the watches of every EndpointSlice
	// the loop started (watchSlices), each cancelled once it stopped;
	// slicesUnsynced: their cache has not synced yet (it is eps).
	sliceWatches   []context.Context
	slicesUnsynced bool
	// trace is every effect the loop had on the world, in order and
	// timed: API writes and their failures, renewals asked for and made,
	// address changes and probes. The property tests compare it whole with
	// a golden file, so a change of behaviour cannot hide in a refactor.
	trace []string
}

// watchSlices starts a watch of every EndpointSlice: its cache is eps,
// synced unless slicesUnsynced, and empty until then.
func (w *world) watchSlices(ctx context.Context) (cache.Indexer, cache.InformerSynced) {
	w.sliceWatches = append(w.sliceWatches, ctx)
	return syncingCache{w.eps, w}, func() bool { return !w.slicesUnsynced }
}

// syncingCache is eps as a watch that lists it sees it: empty until
// synced.
type syncingCache struct {
	cache.Indexer
	w *world
}

func (c syncingCache) ByIndex(name, key string) ([]any, error) {
	if c.w.slicesUnsynced {
		return nil, nil
	}
	return c.Indexer.ByIndex(name, key)
}

// slicesWatched is whether a watch of every EndpointSlice runs, and how
// many were started.
func (w *world) slicesWatched() (running bool, started int) {
	n := len(w.sliceWatches)
	return n > 0 && w.sliceWatches[n-1].Err() == nil, n
}

// record appends an effect to the trace, stamped with the fake clock. A
// benchmark keeps none: it measures the loop, not the harness.
func (w *world) record(what string) {
	if _, bench := w.t.(*testing.B); bench {
		return
	}
	w.trace = append(w.trace, fmt.Sprintf("%s %s", w.clk.Now().Sub(t0), what))
}

const (
	testNS    = "eip-system"
	testCM    = "eip-config"
	testIface = "eth0"
	testDev   = "eipd0"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// informerCache is an informer's cache: what is added passes through the
// informer's transform first.
type informerCache struct {
	cache.Indexer
	keep cache.TransformFunc
	// listed, if set, runs after each listing: the informer delivering
	// while the loop reads what it listed.
	listed *func()
}

// List lists in the order of the keys: a real cache's order is a map's,
// and the golden traces need the loop's inputs in one order.
func (c informerCache) List() []any {
	out := c.Indexer.List()
	slices.SortFunc(out, func(x, y any) int {
		mx, _ := meta.Accessor(x)
		my, _ := meta.Accessor(y)
		return cmp.Or(strings.Compare(mx.GetNamespace(), my.GetNamespace()), strings.Compare(mx.GetName(), my.GetName()))
	})
	if c.listed != nil && *c.listed != nil {
		(*c.listed)()
	}
	return out
}

func (c informerCache) Add(obj any) error {
	kept, err := c.keep(obj)
	if err != nil {
		return err
	}
	return c.Indexer.Add(kept)
}

func (c informerCache) Update(obj any) error {
	kept, err := c.keep(obj)
	if err != nil {
		return err
	}
	return c.Indexer.Update(kept)
}

// newWorld is node self's loop on a cluster with the given ConfigMap data.
func newWorld(t testing.TB, self string, cfg map[string]string) *world {
	w := &world{t: t, clk: clocktesting.NewFakeClock(t0), addrs: map[netip.Prefix]string{}}
	idx := func(obj runtime.Object) cache.Indexer {
		return informerCache{Indexer: cache.NewIndexer(cache.MetaNamespaceKeyFunc, indexersFor(obj)), keep: newInterner().keepWhatIsRead}
	}
	w.svcs, w.nodes = idx(&corev1.Service{}), idx(&corev1.Node{})
	leases := idx(&coordinationv1.Lease{}).(informerCache)
	leases.listed = &w.afterListing
	w.leases = leases
	w.cms, w.eps = idx(&corev1.ConfigMap{}), idx(&discoveryv1.EndpointSlice{})
	a, err := New(Options{
		Node: self, Namespace: testNS, ConfigMap: testCM,
		Client: clientset.Adapt(fake.NewClientset()), Leases: w, Addresser: w, Links: w, Devices: w, Announcer: w, PortFilter: &w.filter,
		Hung: func(quiet time.Duration) { w.hung = quiet },
		Claims: func(ctx context.Context, _ string, _ func(netip.Addr) bool, _ chan<- netif.Claim, _ *netif.Backlog) error {
			<-ctx.Done()
			return nil
		},
		Clock: w.clk, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	a.svcIdx = w.svcs
	a.nodes = corelisters.NewNodeLister(w.nodes)
	a.leaseIdx = w.leases
	a.configMap = corelisters.NewConfigMapLister(w.cms).ConfigMaps(testNS)
	a.apiEpIdx = w.eps
	a.recorder = record.NewFakeRecorder(1 << 16)
	w.a = a
	w.must(w.cms.Add(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: testCM, ResourceVersion: "1"}, Data: cfg}))
	w.addNode(self)
	w.s = newState(a)
	w.s.serving.slices.open = w.watchSlices
	w.loadConfig()
	w.s.sched.dirtyCM = false
	w.s.live = lease.NewLiveness(self, w.s.desired.cfg.RenewInterval, 2*w.s.desired.cfg.RenewInterval)
	return w
}

func (w *world) must(err error) {
	w.t.Helper()
	if err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) addNode(name string) {
	w.must(w.nodes.Add(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "1"}}))
}

// addService adds a Service naming ips as external IPs.
func (w *world) addService(name string, ips ...netip.Addr) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, ResourceVersion: w.nextRV()},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
	for _, ip := range ips {
		svc.Spec.ExternalIPs = append(svc.Spec.ExternalIPs, ip.String())
	}
	w.putService(svc)
	w.s.sched.dirtySvc = true
	for _, ip := range ips {
		w.recordOwner(ip)
	}
}

// recordOwner records in ip's lock, if it records none, the owner a peer
// records (not logged): a test makes a lock and its Service in either
// order, as a setup, and a lock that eipd wrote records its owner.
func (w *world) recordOwner(ip netip.Addr) {
	prev := w.get(leaseName(ip))
	if prev == nil || prev.Annotations[lease.AnnotationOwner] != "" {
		return
	}
	o := w.ownerOf(ip)
	l := lease.WithOwner(prev, o.Service, o.UID)
	l.ResourceVersion = w.nextRV()
	w.must(w.leases.Update(l))
	w.leaseWritten(prev, l)
}

// putService writes svc, as the API server would and the informer
// delivers it to the cache.
func (w *world) putService(svc *corev1.Service) { w.must(w.svcs.Update(svc)) }

// deleteService deletes Service name of default.
func (w *world) deleteService(name string) {
	w.must(w.svcs.Delete(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}))
}

func (w *world) nodeObj(name string) *corev1.Node {
	obj, ok, _ := w.nodes.GetByKey(name)
	if !ok {
		w.t.Fatalf("no Node %s", name)
	}
	return obj.(*corev1.Node).DeepCopy()
}

// svcObj is Service name of default as the API server holds it, as far
// as eipd reads it: made again from the cache, which keeps only that.
func (w *world) svcObj(name string) *corev1.Service {
	obj, ok, _ := w.svcs.GetByKey("default/" + name)
	if !ok {
		w.t.Fatalf("no Service %s", name)
	}
	s := obj.(*ipset.Service)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name, UID: s.UID, ResourceVersion: s.ResourceVersion,
			CreationTimestamp: metav1.NewTime(s.Created), Annotations: maps.Clone(s.Annotations)},
		Spec: corev1.ServiceSpec{Type: s.Type, LoadBalancerClass: s.Class, ExternalIPs: slices.Clone(s.ExternalIPs), LoadBalancerIP: s.LoadBalancerIP,
			IPFamilies: slices.Clone(s.Families), IPFamilyPolicy: s.FamilyPolicy, HealthCheckNodePort: s.HealthCheckNodePort},
		Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: slices.Clone(s.Ingress)}},
	}
	if s.Local {
		svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	}
	for _, p := range s.Ports {
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Protocol: p.Protocol, Port: p.Port})
	}
	return svc
}

func leaseName(ip netip.Addr) string { return lease.NameFor(ip) }

func (w *world) nextRV() string {
	w.rv++
	return strconv.Itoa(w.rv)
}

// heartbeat writes node's heartbeat as a peer would (not logged).
func (w *world) heartbeat(node string, eligible bool) {
	var cur *coordinationv1.Lease
	if obj, ok, _ := w.leases.GetByKey(testNS + "/" + lease.HeartbeatName(node)); ok {
		cur = obj.(*coordinationv1.Lease)
	}
	l := lease.RenewedHeartbeat(cur, testNS, node, w.s.desired.cfg.LeaseDuration, lease.HeartbeatStatus{Eligible: eligible, MACs: lease.FormatMACs([]net.HardwareAddr{peerMAC(node)})}, w.clk.Now())
	l.ResourceVersion = w.nextRV()
	w.must(w.leases.Update(l))
	if cur == nil {
		w.leaseChanged(l) // a renewal is the loop's to notice (heartbeatsRenewed)
	}
}

// peerMAC is the MAC a peer's heartbeat publishes: 02:00:00:00:01 and the
// last byte of its name.
func peerMAC(node string) net.HardwareAddr {
	return net.HardwareAddr{2, 0, 0, 0, 1, node[len(node)-1]}
}

// lock writes ip's lock naming holder, as a peer would (not logged): its
// successor is the best-ranked other Node of the world.
func (w *world) lock(ip netip.Addr, holder string) {
	var next string
	for _, n := range lease.Order(ip, w.nodes.ListKeys()) {
		if n != holder {
			next = n
			break
		}
	}
	w.lockNaming(ip, holder, next)
}

// lockNaming writes ip's lock naming holder and successor, and the owner
// a peer records (not logged).
func (w *world) lockNaming(ip netip.Addr, holder, successor string) {
	prev := w.get(leaseName(ip))
	l := lease.NewLockLease(testNS, ip, holder, successor, nil, w.clk.Now())
	if o := w.ownerOf(ip); o.Service != "" {
		l = lease.WithOwner(l, o.Service, o.UID)
	}
	l.ResourceVersion = w.nextRV()
	w.must(w.leases.Update(l))
	w.leaseWritten(prev, l)
}

// ownerOf is the Service that owns ip as a peer sees it without a lock:
// of the Services naming ip, the oldest, then the first by name.
func (w *world) ownerOf(ip netip.Addr) ipset.Owner {
	var owner *ipset.Service
	// The cache's own list, unsorted: the owner is the least by age and
	// key whatever the order, and sorting every Service for every lock
	// made a world of 5,000 a minute's work.
	for _, obj := range w.svcs.(informerCache).Indexer.List() {
		svc := obj.(*ipset.Service)
		names := false
		ipset.EachIP(svc, func(c ipset.Claim) { names = names || c.IP == ip.String() })
		if names && (owner == nil || cmp.Or(svc.Created.Compare(owner.Created), cmp.Compare(svc.Key(), owner.Key())) < 0) {
			owner = svc
		}
	}
	if owner == nil {
		return ipset.Owner{}
	}
	return ipset.Owner{Service: owner.Key(), UID: owner.UID}
}

// take returns the calls logged since the last take.
func (w *world) take() []string {
	out := w.calls
	w.calls = nil
	return out
}

// pass runs one reconcile pass, then the renewal and writes it asked for,
// each answered at once, as many rounds as they lead to.
func (w *world) pass() {
	w.s.reconcile()
	w.settle()
}

// settle performs the renewal and the writes waiting for the loop and
// hands it their results, passing again after each round.
func (w *world) settle() {
	for range 100 {
		did := w.renew()
		var answered int
		for more := true; more; {
			select {
			case j := <-w.s.writes.jobs:
				w.s.writeDone(w.answer(j))
				answered++
			default:
				more = false
			}
		}
		if answered > 0 {
			w.inFlight = append(w.inFlight, answered)
			did = true
		}
		if !did {
			return
		}
		w.s.pass()
	}
	w.t.Fatal("the loop did not settle in 100 rounds")
}

// heartbeatsRenewed is what the loop's pass asks after a renewal of a
// heartbeat: whether a full pass is needed.
func (w *world) heartbeatsRenewed() bool {
	return heartbeatsRenewed(w.s.live, w.s.leases.heartbeats(), w.s.sched.passVerdicts, w.s.clk.Now())
}

// passDue, fullDue and nextWake are the loop's schedule as run and
// handle read it, now.
func (w *world) passDue() bool { return w.s.sched.passDue(w.s.moment(w.clk.Now())) }

func (w *world) fullDue() bool { return w.s.sched.fullDue(w.s.moment(w.clk.Now())) }

func (w *world) nextWake() time.Time { return w.s.sched.nextWake(w.s.moment(w.clk.Now())) }

// takeDatagrams and heartbeatEvent answer the speaker's kick and a
// heartbeat's watch event as the loop does outside a drain, and say
// whether a pass is needed.
func (w *world) takeDatagrams() bool { return w.s.handle(inDatagrams, reflect.Value{}, false) }

func (w *world) heartbeatEvent() bool { return w.s.handle(inHeartbeats, reflect.Value{}, false) }

// loadConfig reads the ConfigMap as the loop's full pass does.
func (w *world) loadConfig() { w.s.configs.load(&w.s.desired, w.s.lastGood, w.s.live) }

// renew performs the renewal the loop asked for, if it did, and hands it
// the result; the renewed heartbeat is in the cache for the next pass.
func (w *world) renew() bool {
	select {
	case r := <-w.s.hbLine.req:
		sent := w.clk.Now()
		w.renewTries = append(w.renewTries, fmt.Sprintf("%s timeout=%s", sent.Sub(t0), r.timeout))
		w.record(fmt.Sprintf("renewal asked timeout=%s", r.timeout))
		err := w.s.hb.renew(r)
		w.s.self.renewed(renewResult{renewal: r, sent: sent, err: err}, w.s.clk.Now(), w.s.desired.cfg.RenewInterval)
		w.s.sched.hbDirty = w.s.sched.hbDirty || !w.watchLag
		return true
	default:
		return false
	}
}

// answer performs a write the loop queued, as the writers do.
func (w *world) answer(j write) writeResult {
	res := writeResult{write: j}
	switch j.action {
	case lease.Create:
		res.out, res.err = w.Create(context.Background(), j.lease)
	case lease.Delete:
		res.err = w.Delete(context.Background(), j.name, j.rv)
	default:
		res.out, res.err = w.Update(context.Background(), j.lease)
	}
	if w.lockLatency > 0 && w.lockLatency >= j.timeout {
		if res.err == nil {
			w.calls[len(w.calls)-1] += " after the timeout"
			if len(w.trace) > 0 {
				w.trace[len(w.trace)-1] += " after the timeout"
			}
		}
		res.out, res.err = nil, context.DeadlineExceeded
	}
	return res
}

// step advances the clock by d; a peer's renewals are the caller's.
func (w *world) step(d time.Duration) { w.clk.Step(d) }

// setWriters gives the loop n lock writers, as Options.Writers does when
// it starts.
func (w *world) setWriters(n int) { w.a.opt.Writers, w.s.writes.writers = n, n }

// The fake interface (Addresser, Links, Devices, Announcer).

// Ensure: a test deletes a device by removing its addresses from addrs
// and setting deviceGone to its name.
func (w *world) Ensure(iface string) (bool, error) {
	if !w.Owns(iface) {
		return false, fmt.Errorf("%s is not a device", iface)
	}
	gone := w.deviceGone == iface
	if gone {
		w.deviceGone = ""
	}
	return gone, nil
}

// Name: the devices are eipd0, eipd1 and so on.
func (w *world) Name(i int) (string, error) { return fmt.Sprintf("eipd%d", i), nil }

func (w *world) Owns(iface string) bool { return strings.HasPrefix(iface, "eipd") }

func (w *world) Add(iface string, p netip.Prefix, _ time.Duration) error {
	if w.failAdd {
		return errors.New("no such device")
	}
	if _, ok := w.addrs[p]; ok {
		w.refreshes++
		return nil
	}
	w.addrs[p] = iface
	w.call("bind " + p.Addr().String())
	w.step(w.sendTakes)
	return nil
}

func (w *world) Refresh(addrs []netif.Bound, _ time.Duration) error {
	w.refreshes += len(addrs)
	return nil
}

func (w *world) Del(_ string, p netip.Prefix) error {
	delete(w.addrs, p)
	w.call("unbind " + p.Addr().String())
	return nil
}

func (w *world) List(iface string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for p, i := range w.addrs {
		if i == iface {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	return out, nil
}

func (w *world) IfaceFor(netip.Addr) (string, error) { return testIface, nil }
func (w *world) Up(string) (bool, error)             { return true, nil }
func (w *world) MACs() ([]net.HardwareAddr, error) {
	return []net.HardwareAddr{{2, 0, 0, 0, 0, 1}}, nil
}
func (w *world) AnswersARP(string) (bool, error)   { return !w.arpIgnored, nil }
func (w *world) Announce(string, netip.Addr) error { return nil }
func (w *world) Stop(netip.Addr)                   {}
func (w *world) Defend(string, netip.Addr) error   { return nil }
func (w *world) Reannounce(_ string, ips ...netip.Addr) error {
	for _, ip := range ips {
		w.call("announce again " + ip.String())
	}
	return nil
}
func (w *world) Probe(_ string, ip netip.Addr) error {
	w.call("probe " + ip.String())
	w.step(w.sendTakes)
	return nil
}
func (w *world) Ask(_ string, ip netip.Addr) error {
	w.call("ask " + ip.String())
	return w.askErr
}

// tick is one renew interval: the clock moves, the loop's tick refreshes
// and renews, the peers renew, and a pass runs.
func (w *world) tick(peers ...string) {
	w.step(w.s.desired.cfg.RenewInterval)
	w.s.tick()
	for _, p := range peers {
		w.heartbeat(p, true)
	}
	w.pass()
}

// tickUntilDead ticks, peers renewing, until this node judges dead, who
// does not renew, at most eight renew intervals.
func (w *world) tickUntilDead(dead string, peers ...string) {
	for i := 0; i < 8 && w.s.live.Alive(dead, w.clk.Now()); i++ {
		w.tick(peers...)
	}
	assert.Assert(w.t, !w.s.live.Alive(dead, w.clk.Now()))
}

func testIP(n int) netip.Addr {
	return netip.AddrFrom4([4]byte{198, 18, byte(100 + n/250), byte(1 + n%250)})
}

func defaultTestConfig() map[string]string {
	return map[string]string{"ranges": "198.18.96.0/19", "iface": testIface}
}

// probeWait has the world's eipd probe for d before binding (0: never).
func (w *world) probeWait(d time.Duration) {
	w.a.opt.ProbeWait = d
	w.s.conflicts.probeWait = d
}
