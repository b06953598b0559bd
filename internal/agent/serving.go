package agent

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/eip-project/eip/internal/endpoints"
	"github.com/eip-project/eip/internal/ipset"
	"github.com/eip-project/eip/internal/lease"
)

// serving is where the IPs of Services with externalTrafficPolicy: Local
// may live: kube-proxy drops their traffic on a node without a ready
// endpoint, so only nodes with one of each such Service of the IP may hold
// it, and of those the ones whose kube-proxy already delivers to it, when
// some do (package endpoints). IPs no such Service names are absent and
// live on any eligible node.
type serving struct {
	only map[netip.Addr]lease.Only
	// local are the IPs a Local Service names, sorted, as of the last
	// computeEntries.
	local []netip.Addr
	// checks are kube-proxy's verdicts on the nodes with a ready
	// endpoint of a Local Service, made by runner (at most checkSlots at
	// a time, checkQueue more waiting), which sends them to proxied. They
	// end with checkCtx, the loop's.
	checks   endpoints.Checks
	proxied  chan endpoints.Result
	runner   *endpoints.Runner
	checkCtx context.Context
	// slices are the EndpointSlices, watched while local is not empty;
	// unjudged are the IPs of local given heldOnly until they synced.
	slices   sliceWatch
	unjudged map[netip.Addr]bool
	// waits are the IPs this node keeps, where their endpoints still
	// serve, until kube-proxy delivers on a node they may move to
	// (reportWait).
	waits map[netip.Addr]kubeProxyWait

	// in is what it is handed.
	in servingPorts
}

// kubeProxyWait is a holder's wait for kube-proxy on nodes, since when.
type kubeProxyWait struct {
	since time.Time
	nodes []string
}

// checkSlots bounds the health checks in flight: a thousand Services
// becoming ready at once are checked a few at a time. checkQueue bounds
// those waiting for a slot, as data; beyond, a node is judged on its
// EndpointSlices' word (Unknown).
const (
	checkSlots = 16
	checkQueue = 4096
)

// servingPorts are what serving is handed: open starts the watch of
// every EndpointSlice (Agent.watchSlices); the caches of the locks, the
// Services and the Nodes (where a node's kube-proxy is asked),
// kube-proxy's checker (nil: none), and where it reports.
type servingPorts struct {
	open      func(context.Context) (cache.Indexer, cache.InformerSynced)
	lock      func(name string) *lease.Kept
	service   func(key string) *ipset.Service
	nodes     nodeAddrs
	kubeProxy KubeProxy
	node      string
	clk       clock.PassiveClock
	log       *slog.Logger
	events    *eventPoster
}

// newServing is serving with what it is handed.
func newServing(p servingPorts) serving {
	return serving{
		in:      p,
		proxied: make(chan endpoints.Result, 64), checkCtx: context.Background(),
		slices: sliceWatch{open: p.open}, unjudged: map[netip.Addr]bool{}, waits: map[netip.Addr]kubeProxyWait{},
	}
}

// onlyFor is where ip may live.
func (sv *serving) onlyFor(ip netip.Addr) lease.Only { return sv.only[ip] }

// begin starts the health checks' life: they end with ctx, the loop's.
func (sv *serving) begin(ctx context.Context) { sv.checkCtx = ctx }

// watch starts or stops the watch of every EndpointSlice at now, for
// whether an IP of a Local Service exists now.
func (sv *serving) watch(now time.Time) {
	switch started, stopped := sv.slices.update(sv.checkCtx, len(sv.local) > 0, now); {
	case started:
		sv.in.log.Info("watching EndpointSlices: a Service with externalTrafficPolicy: Local has an IP", "ips", len(sv.local))
	case stopped:
		sv.in.log.Info("stopped watching EndpointSlices: no Service with externalTrafficPolicy: Local has had an IP", "for", endpoints.WatchGrace)
	}
}

// warm starts the watch of every EndpointSlice at now before the first
// pass when one of svcs has externalTrafficPolicy: Local, and waits
// until it has synced or ctx ends: the IPs this node held before a
// restart are judged before they are bound again, not pinned to it
// unjudged (heldOnly). If no such Service turns out to have an IP, the
// watch stops after its grace.
func (sv *serving) warm(ctx context.Context, svcs []*ipset.Service, now time.Time) {
	for _, svc := range svcs {
		if svc.Local {
			sv.slices.update(sv.checkCtx, true, now)
			sv.in.log.Info("watching EndpointSlices: a Service has externalTrafficPolicy: Local")
			cache.WaitForCacheSync(ctx.Done(), sv.slices.synced)
			return
		}
	}
}

// localIPs takes the IPs a Local Service names, from order and entries,
// the IPs to manage.
func (sv *serving) localIPs(order []managed, entries map[netip.Addr]ipset.Entry) {
	sv.local = sv.local[:0]
	for _, m := range order {
		if len(entries[m.ip].Local) > 0 {
			sv.local = append(sv.local, m.ip)
		}
	}
}

// judged: where ip may live was judged from the synced EndpointSlices.
func (sv *serving) judged(ip netip.Addr) { delete(sv.unjudged, ip) }

// unjudge: ip may live where it is held (heldOnly) until the watch synced.
func (sv *serving) unjudge(ip netip.Addr) { sv.unjudged[ip] = true }

// decided keeps next, where each IP of a Local Service may live, and
// forgets what it knew of the others.
func (sv *serving) decided(next map[netip.Addr]lease.Only) {
	maps.DeleteFunc(sv.unjudged, func(ip netip.Addr, _ bool) bool { _, ok := next[ip]; return !ok })
	maps.DeleteFunc(sv.waits, func(ip netip.Addr, _ kubeProxyWait) bool { _, ok := next[ip]; return !ok })
	sv.only = next
}

// waitBegan: this node keeps ip until kube-proxy delivers elsewhere (w).
func (sv *serving) waitBegan(ip netip.Addr, w kubeProxyWait) { sv.waits[ip] = w }

// waitEnded: this node no longer keeps ip for kube-proxy.
func (sv *serving) waitEnded(ip netip.Addr) { delete(sv.waits, ip) }

// ask starts kube-proxy's check k at addr through the runner, made on the
// first check so that a node with no Local Service runs none; it says
// whether the check started or was queued.
func (sv *serving) ask(kp endpoints.Checker, k endpoints.Key, gen uint64, addr netip.AddrPort) bool {
	if sv.runner == nil {
		sv.runner = endpoints.NewRunner(sv.checkCtx, kp, sv.proxied, checkSlots, checkQueue)
	}
	return sv.runner.Start(k, gen, addr)
}

// eligibility is where the IP of e may live, from the EndpointSlices of
// its Local Services and what kube-proxy said of their ready nodes.
func (sv *serving) eligibility(e ipset.Entry) endpoints.Eligibility {
	per := make([]map[string]endpoints.Readiness, len(e.Local))
	ask := sv.asksKubeProxy(e.IP)
	for i, svc := range e.Local {
		per[i] = sv.checks.Judge(svc, endpoints.Nodes(sv.slices.slicesOf(svc)), ask, sv.startCheck)
	}
	return endpoints.Eligible(per)
}

// asksKubeProxy reports whether this node checks kube-proxy for ip: only
// its holder and its successor, whose decisions wait for the verdicts
// (the holder keeps it until kube-proxy delivers where it may move; the
// successor takes it over). Every node asking would send each node's
// kube-proxy a check from every other.
func (sv *serving) asksKubeProxy(ip netip.Addr) bool {
	k := sv.in.lock(lease.NameFor(ip))
	return k != nil && (k.Holder == sv.in.node || k.Successor == sv.in.node)
}

// startCheck asks kube-proxy on k's node, at its first address and the
// health check node port of k's Service, whether it delivers to the
// node's endpoints; the verdict comes to the loop on proxied. It returns
// false when it cannot ask (the queue is full, the node's address cannot
// be a node's own), and for this node itself: a node takes an IP
// handed to it on the word of the holder, which asked this node's
// kube-proxy before; were it to wait for its own verdict, it would refuse
// what the holder already gave up. Racing for an IP no node serves, it
// binds no later than before.
func (sv *serving) startCheck(k endpoints.Key, gen uint64) bool {
	kp := sv.in.kubeProxy
	addr, ok := sv.in.nodes.peerAddr(k.Node)
	port := healthCheckPort(sv.in.service(k.Service))
	// A Node object naming loopback, a link-local address (a cloud's
	// metadata service) or a multicast one would send a check from the
	// host network to the host itself or elsewhere: none can be a node's.
	if kp == nil || !ok || !addr.IsGlobalUnicast() || port == 0 || k.Node == sv.in.node {
		return false
	}
	return sv.ask(kp, k, gen, netip.AddrPortFrom(addr, port))
}

// healthCheckPort is the health check node port of svc, 0 if it has none
// (or is nil).
func healthCheckPort(svc *ipset.Service) uint16 {
	if svc == nil || svc.HealthCheckNodePort <= 0 || svc.HealthCheckNodePort > 65535 {
		return 0
	}
	return uint16(svc.HealthCheckNodePort)
}

// verdict takes a verdict of kube-proxy's and says whether where an IP
// may live is to be judged again.
func (sv *serving) verdict(r endpoints.Result) (judgeAgain bool) {
	sv.runner.Finished(r)
	return sv.checks.Done(r)
}

// update judges again where the IPs of Local Services may live and
// returns those whose answer changed. With entries it first takes the IPs
// anew from the entries (they were recomputed), and starts or stops the
// watch of EndpointSlices; otherwise only EndpointSlices changed, and only
// the IPs of Local Services are judged. Until the watch has synced, an IP
// judged before keeps its answer, and one not yet judged stays with its
// holder (heldOnly). d is what the loop manages, bound what it binds,
// and view the loop's (whether this node is the first live one, which
// reports).
func (sv *serving) update(entries bool, d *desired, bound map[netip.Addr]binding, view func(time.Time) lease.View) []netip.Addr {
	if entries {
		sv.localIPs(d.order, d.entries)
		sv.watch(sv.in.clk.Now())
	}
	judge := sv.slices.ready()
	var changed []netip.Addr
	next := make(map[netip.Addr]lease.Only, len(sv.local))
	for _, ip := range sv.local {
		e := d.entries[ip]
		old, was := sv.only[ip]
		unjudged := sv.unjudged[ip]
		var o lease.Only
		switch {
		case judge:
			sv.judged(ip)
			el := sv.eligibility(e)
			o = lease.Only{Restricted: true, Nodes: el.Nodes}
			if !was || unjudged || !slices.Equal(old.Nodes, o.Nodes) {
				sv.reportServing(view, e, el, was && !unjudged && len(old.Nodes) == 0, !was || unjudged)
			}
			sv.reportWait(e, el, bound)
		case was && !unjudged:
			o = old
		default:
			sv.unjudge(ip)
			o = sv.heldOnly(ip, bound)
		}
		next[ip] = o
		if !was || !slices.Equal(old.Nodes, o.Nodes) {
			changed = append(changed, ip)
		}
	}
	for ip := range sv.only {
		if _, ok := next[ip]; !ok {
			changed = append(changed, ip)
		}
	}
	sv.decided(next)
	if judge {
		if gone := sv.checks.Sweep(); sv.runner != nil {
			sv.runner.Cancel(gone)
		}
	}
	return changed
}

// heldOnly is where the IP of a Local Service may live before the watch
// has synced: where it is, with its lock's holder when that is another
// node or this one has it bound; else nowhere. An empty cache would say no
// node has an endpoint: the holder would give the IP up, or a node
// without an endpoint would take it. An IP this node holds unbound (one
// it just auto-assigned) is released rather than bound where no endpoint
// may be; at a start, serving.warm judges those this node held before.
func (sv *serving) heldOnly(ip netip.Addr, bound map[netip.Addr]binding) lease.Only {
	o := lease.Only{Restricted: true}
	l := sv.in.lock(lease.NameFor(ip))
	if l == nil || l.Holder == "" {
		return o
	}
	_, held := bound[ip]
	if h := l.Holder; h != sv.in.node || held {
		o.Nodes = []string{h}
	}
	return o
}

// reportServing logs where the IP of e may now live and, from the first
// live node (as eventPoster.rejected), posts an Event on its Services when no
// node may hold it any more (Warning NoEndpoints; at a start too) and when
// one may again (Normal EndpointsReady). wasNone: no node could hold it.
func (sv *serving) reportServing(view func(time.Time) lease.View, e ipset.Entry, el endpoints.Eligibility, wasNone, first bool) {
	why := el.Why(e.Local)
	sv.in.log.Info("where an IP may live changed", "ip", e.IP, "service", strings.Join(e.Local, ","), "reason", why)
	v := view(sv.in.clk.Now())
	if len(v.Live) > 0 && v.Live[0] != sv.in.node {
		return
	}
	switch {
	case len(el.Nodes) == 0 && !wasNone:
		sv.in.events.onIP(e.IP, corev1.EventTypeWarning, "NoEndpoints", fmt.Sprintf("%s is not bound: %s", e.IP, why))
	case len(el.Nodes) > 0 && wasNone && !first:
		sv.in.events.onIP(e.IP, corev1.EventTypeNormal, "EndpointsReady", fmt.Sprintf("%s may be bound again: %s", e.IP, why))
	}
}

// reportWait posts an Event on the Services of e's IP when this node, its
// holder, begins to keep it until kube-proxy delivers on a node it may
// move to (Normal WaitingForKubeProxy), and one when that wait ends: kube-
// proxy there delivers (Normal KubeProxyDelivers), could not tell or did
// not within its time (Warning KubeProxyUnverified: the IP moves on the
// EndpointSlices' word), or the endpoints changed (Normal
// KubeProxyWaitEnded). Once per wait: the checks themselves write nothing.
func (sv *serving) reportWait(e ipset.Entry, el endpoints.Eligibility, bound map[netip.Addr]binding) {
	var waitsFor []string
	if _, held := bound[e.IP]; held {
		waitsFor = el.WaitsFor(sv.in.node)
	}
	now := sv.in.clk.Now()
	wait, was := sv.waits[e.IP]
	svcs := strings.Join(e.Local, ", ")
	switch {
	case len(waitsFor) > 0 && !was:
		sv.waitBegan(e.IP, kubeProxyWait{since: now, nodes: slices.Clone(waitsFor)})
		sv.in.events.onIP(e.IP, corev1.EventTypeNormal, "WaitingForKubeProxy", fmt.Sprintf("%s stays on %s, where endpoints of %s still serve, until kube-proxy on %s delivers to the ready ones there",
			e.IP, sv.in.node, svcs, strings.Join(waitsFor, " or ")))
	case len(waitsFor) == 0 && was:
		sv.waitEnded(e.IP)
		waited := now.Sub(wait.since).Round(10 * time.Millisecond)
		to := slices.DeleteFunc(slices.Clone(wait.nodes), func(n string) bool { return !slices.Contains(el.Nodes, n) })
		switch node, v := sv.checks.Outcome(e.Local, to); v {
		case endpoints.Delivers:
			sv.in.events.onIP(e.IP, corev1.EventTypeNormal, "KubeProxyDelivers", fmt.Sprintf("kube-proxy on %s delivers to %s after %s: %s moves there", node, svcs, waited, e.IP))
		case endpoints.Unknown:
			sv.in.events.onIP(e.IP, corev1.EventTypeWarning, "KubeProxyUnverified", fmt.Sprintf("kube-proxy on %s did not say it delivers to %s within %s, or could not be asked: %s moves there on its EndpointSlices' word",
				node, svcs, waited, e.IP))
		default:
			sv.in.events.onIP(e.IP, corev1.EventTypeNormal, "KubeProxyWaitEnded", fmt.Sprintf("%s waits for kube-proxy no more after %s: %s", e.IP, waited, el.Why(e.Local)))
		}
	}
}
