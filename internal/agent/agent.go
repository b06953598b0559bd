package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	utilwait "k8s.io/apimachinery/pkg/util/wait"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/eip-project/eip/internal/endpoints"
	"github.com/eip-project/eip/internal/ipset"
	"github.com/eip-project/eip/internal/kubeclient"
	"github.com/eip-project/eip/internal/lease"
	"github.com/eip-project/eip/internal/listwatch"
	"github.com/eip-project/eip/internal/netif"
	"github.com/eip-project/eip/internal/wire"
)

// Options wires an Agent. Every field but Metrics and Router is required.
type Options struct {
	Node      string // this node's name, as in its Node object
	Namespace string // where Leases and the ConfigMap live
	ConfigMap string
	// Build is this eipd's build (buildinfo.Info), written in its heartbeat;
	// empty writes none.
	Build string

	Client    kubeclient.Interface
	Leases    LeaseWriter
	Addresser Addresser
	Links     Links
	// Devices hold the addresses that need no lifetime (see
	// placeOnDevice), spread over them (addressDevices).
	Devices Devices
	// Hung is called, once, when the owner loop has made no progress for
	// loopHungAfter (see watchdog); eipd exits there.
	Hung      func(quiet time.Duration)
	Announcer Announcer
	// PortFilter keeps traffic to the managed IPs to their Services'
	// ports, unless the ConfigMap's port-filter is off.
	PortFilter PortFilter
	// Router announces routes in route mode; nil when eipd has none, and
	// then a range with announce=bgp binds its IPs unannounced.
	Router Router
	Claims ClaimWatcher
	// AddrEvents and LinkEvents come from netif.Watch.
	AddrEvents <-chan netif.AddrEvent
	LinkEvents <-chan netif.LinkEvent
	// ProbeWait is how long an IP no eip node was serving is probed for
	// before it is bound (see addrConflicts); 0 binds without probing.
	ProbeWait time.Duration
	// WirePace paces the checks of the wire this node makes as successor
	// (docs/design.md, Checking the wire); zero Every checks nothing.
	WirePace wire.Pace
	// APIServer are the addresses eipd reaches the API server at: never
	// bound, like the nodes' own addresses.
	APIServer []netip.Addr
	// ListenLAN opens the port of liveness over the LAN (lanlive.Listen);
	// nil leaves this node on heartbeat liveness alone.
	ListenLAN ListenLAN
	// LastGood keeps the last good configuration in the cluster, for an
	// eipd that starts while the ConfigMap is invalid (lastgood.go); nil
	// keeps it in memory only.
	LastGood LastGood
	// KubeProxy tells whether kube-proxy on a node delivers to the
	// node's endpoints of a Local Service (endpoints.KubeProxy); nil
	// leaves the EndpointSlices alone to decide.
	KubeProxy KubeProxy

	Clock clock.WithTicker
	Log   *slog.Logger
	// Metrics receives counts; nil discards them.
	Metrics Metrics
	// Writers is the number of concurrent Lease writes (default 32). A
	// write is mostly a round trip: with 8, a survivor of a mass failover
	// spent its time waiting on them, at a fraction of the API server's
	// rate (docs/benchmarks.md).
	Writers int
	// Resync is the period of the full address resync (default 10s).
	Resync time.Duration
}

// KubeProxy asks kube-proxy's health check node port at addr until it
// has a verdict (endpoints.KubeProxy.Check).
type KubeProxy interface {
	Check(ctx context.Context, addr netip.AddrPort) endpoints.Verdict
}

// Agent is one node's eipd.
type Agent struct {
	opt      Options
	log      *slog.Logger
	clk      clock.WithTicker
	recorder record.EventRecorder

	svcIdx    cache.Indexer // the Services' cache, listed whole by allServices
	nodes     corelisters.NodeLister
	leaseIdx  cache.Indexer // the Leases' cache, heartbeats indexed (heartbeatIndex)
	configMap corelisters.ConfigMapNamespaceLister
	// apiEpIdx is the kubernetes Service's EndpointSlices, as much as
	// keepOfSlice keeps: the API server's addresses, never bound. Every
	// other EndpointSlice is in sliceWatch's cache, while it runs.
	apiEpIdx cache.Indexer
	synced   []cache.InformerSynced

	// kicks: informers only signal which kind of object changed;
	// hbKick is a renewal of a heartbeat, leaseKick any other Lease change,
	// epKick an EndpointSlice change the watch of them all saw, or that
	// watch synced (watchSlices).
	svcKick, nodeKick, leaseKick, hbKick, cmKick, epKick chan struct{}
	readyCh                                              chan struct{}

	news leaseNews
}

// New checks opt and returns an Agent; nothing runs until Run.
func New(opt Options) (*Agent, error) {
	var errs error
	for name, missing := range map[string]bool{
		"node name": opt.Node == "", "namespace": opt.Namespace == "", "config map name": opt.ConfigMap == "",
		"client": opt.Client == nil, "lease writer": opt.Leases == nil, "addresser": opt.Addresser == nil,
		"links": opt.Links == nil, "devices": opt.Devices == nil, "hung": opt.Hung == nil, "announcer": opt.Announcer == nil, "port filter": opt.PortFilter == nil, "claim watcher": opt.Claims == nil,
		"clock": opt.Clock == nil, "logger": opt.Log == nil,
	} {
		if missing {
			errs = errors.Join(errs, fmt.Errorf("agent: %s is required", name))
		}
	}
	if errs != nil {
		return nil, errs
	}
	if opt.Metrics == nil {
		opt.Metrics = nopMetrics{}
	}
	if opt.Router == nil {
		opt.Router = nopRouter{}
	}
	if opt.Writers <= 0 {
		opt.Writers = 32
	}
	if opt.Resync <= 0 {
		opt.Resync = 10 * time.Second
	}
	return &Agent{
		opt: opt, log: opt.Log.With("node", opt.Node), clk: opt.Clock,
		svcKick: make(chan struct{}, 1), nodeKick: make(chan struct{}, 1),
		leaseKick: make(chan struct{}, 1), hbKick: make(chan struct{}, 1), cmKick: make(chan struct{}, 1), epKick: make(chan struct{}, 1),
		readyCh: make(chan struct{}), news: leaseNews{changes: map[string]bool{}},
	}, nil
}

// Ready is closed once the informers have synced and the first pass ran.
func (a *Agent) Ready() <-chan struct{} { return a.readyCh }

func kick(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func kicker(ch chan struct{}) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { kick(ch) },
		UpdateFunc: func(any, any) { kick(ch) },
		DeleteFunc: func(any) { kick(ch) },
	}
}

// leaseNews is what the Lease informer saw since the loop last took it.
type leaseNews struct {
	mu sync.Mutex
	// changes are the lock Leases changed (takeLeaseChanges); changedAll
	// says another Lease was added or deleted (a heartbeat: a node came
	// or went).
	changes    map[string]bool
	changedAll bool
	// vouched are the nodes that lock writes named as new holders, each
	// write made by another node (lease.Liveness.Vouched).
	vouched []string
	// rv is the newest resourceVersion of the Leases the informer
	// delivered. The watch delivers them in order, so the cache holds
	// every Lease write up to it (see leasesSeen).
	rv string
}

// leaseKicker tells a renewal of a heartbeat (hbKick), which seldom needs a
// reconcile pass (see state.heartbeatsRenewed), from any other Lease change
// (leaseKick).
func (a *Agent) leaseKicker() cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { a.leaseWritten(nil, obj) },
		UpdateFunc: func(old, obj any) {
			if isHeartbeat(old) && isHeartbeat(obj) {
				a.news.mu.Lock()
				a.sawLease(obj)
				a.news.mu.Unlock()
				kick(a.hbKick)
				return
			}
			a.leaseWritten(old, obj)
		},
		DeleteFunc: a.leaseChanged,
	}
}

// leaseWritten is leaseChanged for a Lease added or updated (old is nil
// for one added): a lock whose holder became another node, in a write
// of another node, vouches for that holder.
func (a *Agent) leaseWritten(old, obj any) {
	if h := newHolder(old, obj); h != "" && h != a.opt.Node {
		a.news.mu.Lock()
		a.news.vouched = append(a.news.vouched, h)
		a.news.mu.Unlock()
	}
	a.leaseChanged(obj)
}

// newHolder is the holder lock obj names when old named another (or was
// no lock); "" otherwise.
func newHolder(old, obj any) string {
	k, ok := obj.(*lease.Kept)
	if !ok || k.Holder == "" {
		return ""
	}
	if o, ok := old.(*lease.Kept); ok && o != nil && o.Holder == k.Holder {
		return ""
	}
	return k.Holder
}

// leaseChanged notes which lock changed, so that the loop decides again
// only its IP, and wakes the loop.
func (a *Agent) leaseChanged(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	k, ok := obj.(*lease.Kept)
	a.news.mu.Lock()
	a.sawLease(obj)
	if ok {
		a.news.changes[k.Name] = true
	} else {
		a.news.changedAll = true
	}
	a.news.mu.Unlock()
	kick(a.leaseKick)
}

// sawLease notes the resourceVersion of a Lease the informer delivered (a
// deleted one's is that of its deletion); the caller holds news.mu.
func (a *Agent) sawLease(obj any) {
	var rv string
	switch l := obj.(type) {
	case *lease.Kept:
		rv = l.ResourceVersion
	case *coordinationv1.Lease:
		rv = l.ResourceVersion
	default:
		return
	}
	if a.news.rv == "" || lease.Newer(rv, a.news.rv) {
		a.news.rv = rv
	}
}

// leasesSeen is the newest resourceVersion of the Leases the informer
// delivered: the cache holds every Lease write up to it, and, read before
// the cache, up to the cache's copies read after it.
func (a *Agent) leasesSeen() string {
	a.news.mu.Lock()
	defer a.news.mu.Unlock()
	return a.news.rv
}

// takeLeaseChanges returns the names of the locks changed since the last
// call, whether any other Lease was added or deleted, and the holders
// vouched for meanwhile.
func (a *Agent) takeLeaseChanges() (names map[string]bool, all bool, vouched []string) {
	a.news.mu.Lock()
	defer a.news.mu.Unlock()
	names, all, vouched = a.news.changes, a.news.changedAll, a.news.vouched
	a.news.changes, a.news.changedAll, a.news.vouched = map[string]bool{}, false, nil
	return names, all, vouched
}

// lock is the lock named name in the cache, nil if none. It reads the
// cache by key, as a lister does, without the NotFound error a lister
// makes for a name it does not hold: at a cold start the loop looks up
// thousands of locks not yet written, and those errors were a twentieth of
// what eipd allocated.
func (a *Agent) lock(name string) *lease.Kept {
	obj, ok, _ := a.leaseIdx.GetByKey(a.opt.Namespace + "/" + name)
	if !ok {
		return nil
	}
	k, _ := obj.(*lease.Kept)
	return k
}

// recordedOwner is the owner the lock of ip in the cache records
// (ipset.Incumbents).
func (a *Agent) recordedOwner(ip netip.Addr) ipset.Owner {
	if k := a.lock(lease.NameFor(ip)); k != nil && k.Err == nil {
		return ipset.Owner{Service: k.Owner, UID: k.OwnerUID}
	}
	return ipset.Owner{}
}

// heartbeats lists the heartbeat Leases in the cache. The informer watches
// only the agent's namespace.
func (a *Agent) heartbeats() []*coordinationv1.Lease {
	objs, _ := a.leaseIdx.ByIndex(heartbeatIndex, lease.RoleHeartbeat)
	return objectsOf[coordinationv1.Lease](objs)
}

// allLocks is every lock in the cache (eipd watches one namespace). The
// lister's List would look for a namespace index first, which the cache
// does not keep (indexersFor), then go through every Lease's metadata and
// labels and append each to a growing slice: a full pass lists 10,000
// locks.
func (a *Agent) allLocks() []*lease.Kept {
	return objectsOf[lease.Kept](a.leaseIdx.List())
}

// allServices is every Service in the cache, read as allLocks reads the
// locks: the lister's List appended each of them to a growing slice,
// 0.3 MB a full pass at 10,000 Services, which the allocation pass lists.
func (a *Agent) allServices() []*ipset.Service {
	return objectsOf[ipset.Service](a.svcIdx.List())
}

// service is the Service "namespace/name" in the cache, nil if none.
func (a *Agent) service(key string) *ipset.Service {
	obj, ok, _ := a.svcIdx.GetByKey(key)
	if !ok {
		return nil
	}
	svc, _ := obj.(*ipset.Service)
	return svc
}

// objectsOf is the objects of a cache's list that are T, in a slice of
// their number.
func objectsOf[T any](objs []any) []*T {
	out := make([]*T, 0, len(objs))
	for _, o := range objs {
		if t, ok := o.(*T); ok {
			out = append(out, t)
		}
	}
	return out
}

// apiSlices is the kubernetes Service's EndpointSlices in the cache.
func (a *Agent) apiSlices() []*discoveryv1.EndpointSlice {
	return slicesOf(a.apiEpIdx, listwatch.APIServiceNamespace+"/"+listwatch.APIService)
}

// slicesOf is the EndpointSlices of Service key ("namespace/name") in
// idx, a cache of EndpointSlices (indexed by serviceIndex).
func slicesOf(idx cache.Indexer, key string) []*discoveryv1.EndpointSlice {
	objs, _ := idx.ByIndex(serviceIndex, key)
	return objectsOf[discoveryv1.EndpointSlice](objs)
}

// watchSlices starts the watch of every EndpointSlice, which runs until
// ctx ends, and returns its cache and whether that has synced. Each
// change it sees, and its sync (even with no slice to add), kicks
// epKick: the loop judges no Local IP from a cache not yet synced.
func (a *Agent) watchSlices(ctx context.Context) (cache.Indexer, cache.InformerSynced) {
	inf := a.patientInformer(listwatch.For(a.opt.Client, a.opt.Namespace, a.opt.ConfigMap).EndpointSlices, &discoveryv1.EndpointSlice{})
	// A new informer, not yet run, takes any handler.
	reg, _ := inf.AddEventHandler(kicker(a.epKick))
	go inf.RunWithContext(ctx)
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
			kick(a.epKick)
		}
	}()
	return inf.GetIndexer(), reg.HasSynced
}

func isHeartbeat(obj any) bool {
	l, ok := obj.(*coordinationv1.Lease)
	return ok && l.Labels[lease.RoleLabel] == lease.RoleHeartbeat
}

// startInformers starts the watches the agent needs: Services and Nodes
// cluster-wide, in its namespace the Leases eip manages and its one
// ConfigMap, and in default the kubernetes Service's EndpointSlices, whose
// change counts as a Node's (both change the addresses never bound). They
// run until stop is closed. The other EndpointSlices are watched only
// while a Service with externalTrafficPolicy: Local has an IP
// (sliceWatch).
func (a *Agent) startInformers(stop <-chan struct{}) error {
	set := listwatch.For(a.opt.Client, a.opt.Namespace, a.opt.ConfigMap)
	svc := a.patientInformer(set.Services, &corev1.Service{})
	node := a.patientInformer(set.Nodes, &corev1.Node{})
	ls := a.patientInformer(set.Leases, &coordinationv1.Lease{})
	cms := a.patientInformer(set.ConfigMap, &corev1.ConfigMap{})
	eps := a.patientInformer(set.APIEndpoints, &discoveryv1.EndpointSlice{})
	all := []struct {
		inf     cache.SharedIndexInformer
		handler cache.ResourceEventHandlerFuncs
	}{{svc, kicker(a.svcKick)}, {node, kicker(a.nodeKick)}, {ls, a.leaseKicker()}, {cms, kicker(a.cmKick)}, {eps, kicker(a.nodeKick)}}
	for _, h := range all {
		if _, err := h.inf.AddEventHandler(h.handler); err != nil {
			return fmt.Errorf("watch: %w", err)
		}
		a.synced = append(a.synced, h.inf.HasSynced)
	}
	a.svcIdx = svc.GetIndexer()
	a.nodes = corelisters.NewNodeLister(node.GetIndexer())
	a.leaseIdx = ls.GetIndexer()
	a.configMap = corelisters.NewConfigMapLister(cms.GetIndexer()).ConfigMaps(a.opt.Namespace)
	a.apiEpIdx = eps.GetIndexer()
	for _, h := range all {
		go h.inf.RunWithContext(utilwait.ContextForChannel(stop))
	}
	return nil
}

func (a *Agent) startRecorder(stop <-chan struct{}) error {
	s, err := kubeclient.NewScheme()
	if err != nil {
		return err
	}
	b := record.NewBroadcaster(record.WithContext(context.Background()))
	b.StartRecordingToSink(kubeclient.EventSink{Client: a.opt.Client})
	a.recorder = b.NewRecorder(s, corev1.EventSource{Component: "eipd", Host: a.opt.Node})
	go func() {
		<-stop
		b.Shutdown()
	}()
	return nil
}

// Run runs the agent until ctx ends, then hands off what it holds, deletes
// its heartbeat and returns. The returned error is nil after a clean
// shutdown.
func (a *Agent) Run(ctx context.Context) error {
	// Informers, writers and the heartbeat outlive ctx: the shutdown
	// handoff needs them. They stop when Run returns.
	stop := make(chan struct{})
	defer close(stop)
	if err := a.startInformers(stop); err != nil {
		return err
	}
	if err := a.startRecorder(stop); err != nil {
		return err
	}
	a.log.Info("waiting for caches")
	if !cache.WaitForCacheSync(ctx.Done(), a.synced...) {
		return fmt.Errorf("caches did not sync: %w", ctx.Err())
	}
	if err := a.checkIdentity(); err != nil {
		return err
	}
	s := newState(a)
	return s.run(ctx, stop)
}
