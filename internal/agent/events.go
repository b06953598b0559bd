package agent

import (
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/eip-project/eip/internal/ipset"
)

// Events on a Service (Bound, TakenOver, Moved, Unheard, …) tell its owner,
// in `kubectl describe service`, where its IPs went. Each one is a write to
// the API server, and a node posts them one at a time: a node that binds
// 3,000 IPs at a cold start, or takes a dead peer's 3,000 over, would keep
// the API server writing Events for minutes after the IPs were bound. So
// each node posts at most eventBurst of them at once and one more each
// eventRefill, Normal and Warning Events each on their own budget (a flood
// of Bound leaves room for an AddressConflict); the rest are counted, by
// type and reason, and said in one EventsSummarised Event on the node's
// Node object at most every summaryEvery (and counted in
// eip_events_summarised_total). The Event volume of a node is then
// bounded by time, whatever the number of IPs; the Leases and `kubectl
// eip status` say where every IP is.
//
// The Normal budget starts with startBurst when eipd starts and fills
// one a second from there: the binds of a start (every IP of a new
// cluster, or a restarted node's own IPs back on it) are seldom news to a
// Service's owner, yet their first eventBurst Events were a tenth of the
// API server's writes in a 3,000-IP cold start, each costing it more CPU
// than a lock (docs/benchmarks.md). Warnings (an AddressConflict found at
// start) keep their whole budget, and each namespace has its own: one
// tenant's thousand refused Services do not push another tenant's
// AddressConflict into the summary.
const (
	eventBurst   = 100
	startBurst   = 10
	eventRefill  = time.Second
	summaryEvery = 10 * time.Second
)

// eventBudget decides which Service Events a node posts, and what it
// summarises instead.
type eventBudget struct {
	// limits are by type, Normal, or Warning and namespace (warningOf).
	limits map[string]*rate.Limiter
	// left counts the Events not posted since since, by "type reason".
	left  map[string]int
	since time.Time
}

// newEventBudget is the budget of a node whose eipd started at start.
func newEventBudget(start time.Time) *eventBudget {
	normal := rate.NewLimiter(rate.Every(eventRefill), eventBurst)
	normal.AllowN(start, eventBurst-startBurst)
	return &eventBudget{limits: map[string]*rate.Limiter{corev1.EventTypeNormal: normal}, left: map[string]int{}}
}

// allow says whether an Event of this type and reason on a Service of
// namespace may be posted at now; if not, it is counted for the next
// summary.
func (b *eventBudget) allow(now time.Time, kind, namespace, reason string) bool {
	budget := kind
	if kind == corev1.EventTypeWarning {
		budget = warningOf(namespace)
	}
	l, ok := b.limits[budget]
	if !ok {
		l = rate.NewLimiter(rate.Every(eventRefill), eventBurst)
		b.limits[budget] = l
	}
	if l.AllowN(now, 1) {
		return true
	}
	if len(b.left) == 0 {
		b.since = now
	}
	b.left[kind+" "+reason]++
	return false
}

// summary returns the summary due at now, if one is: the Events left out
// since the first of them, once summaryEvery has passed since it, in a
// Warning if any of them was one. The counts start again from zero.
func (b *eventBudget) summary(now time.Time) (kind, msg string, ok bool) {
	if len(b.left) == 0 || now.Sub(b.since) < summaryEvery {
		return "", "", false
	}
	kind = corev1.EventTypeNormal
	total := 0
	parts := make([]string, 0, len(b.left))
	for _, k := range slices.Sorted(maps.Keys(b.left)) {
		total += b.left[k]
		parts = append(parts, fmt.Sprintf("%d %s", b.left[k], k))
		if strings.HasPrefix(k, corev1.EventTypeWarning+" ") {
			kind = corev1.EventTypeWarning
		}
	}
	msg = fmt.Sprintf("%d Events on Services not posted in the last %s (%s): a node posts at most %d of each type at once and one more each %s; the IP locks and `kubectl eip status` show where every IP is",
		total, now.Sub(b.since).Round(time.Second), strings.Join(parts, ", "), eventBurst, eventRefill)
	clear(b.left)
	b.forgetFull(now)
	return kind, msg, true
}

// warningOf is the key of namespace's Warning budget.
func warningOf(namespace string) string { return corev1.EventTypeWarning + "/" + namespace }

// forgetFull drops the Warning budgets that are full again at now: a new
// one is the same, and so the budgets kept are those of the namespaces
// that had Warnings within the last eventBurst refills.
func (b *eventBudget) forgetFull(now time.Time) {
	maps.DeleteFunc(b.limits, func(k string, l *rate.Limiter) bool {
		return strings.HasPrefix(k, corev1.EventTypeWarning+"/") && l.TokensAt(now) >= eventBurst
	})
}

// eventPoster posts the loop's Events on Services, within the node's
// budget, and the summary of what the budget left out on this node's Node
// object. It is handed the recorder, the Services' cache and the Node
// lister; the loop hands it the managed IPs each time it computes them.
type eventPoster struct {
	budget   *eventBudget
	recorder record.EventRecorder
	service  func(key string) *ipset.Service // the Services' cache
	nodes    corelisters.NodeLister
	node     string
	clk      clock.PassiveClock
	log      *slog.Logger
	metrics  Metrics
	// entries are the managed IPs and their Services, as the loop last
	// computed them: desired.manage makes a new map each time and never
	// changes one it handed out.
	entries map[netip.Addr]ipset.Entry
}

// managed takes the IPs whose Services an Event about an IP goes to.
func (p *eventPoster) managed(entries map[netip.Addr]ipset.Entry) { p.entries = entries }

// onIP posts an Event on each Service of ip, within the node's budget;
// the rest are summarised.
func (p *eventPoster) onIP(ip netip.Addr, kind, reason, msg string) {
	e, ok := p.entries[ip]
	if !ok {
		return
	}
	for _, key := range e.Services {
		p.onService(key, kind, reason, msg)
	}
}

// rejected records a Warning event for each newly rejected address, once
// per node and reason, within the node's Event budget: a ConfigMap edit
// that leaves a thousand Services' IPs outside every range is a thousand
// rejections at once. Only the first live node reports (reporter), so a
// three-node cluster does not triple every event; a node that has not yet
// heard any heartbeat counts as first, which at a cluster's start is every
// node, and the budget bounds that too.
func (p *eventPoster) rejected(fresh []ipset.Rejection, reporter bool) {
	for _, r := range fresh {
		p.log.Warn("not managing an address", "service", r.Service, "ip", r.IP, "reason", r.Reason)
		switch {
		case !reporter:
		case r.Preference:
			p.onService(r.Service, corev1.EventTypeWarning, "PreferenceIgnored", fmt.Sprintf("%s does not decide where %s lives: %s", ipset.AnnotationPreferredNodes, r.IP, r.Reason))
		default:
			p.onService(r.Service, corev1.EventTypeWarning, "AddressRejected", fmt.Sprintf("%s is not bound by eip: %s", r.IP, r.Reason))
		}
	}
}

// onService posts an Event on the Service key ("namespace/name"), if
// the node's budget allows it; otherwise it is counted for the next
// summary.
func (p *eventPoster) onService(key, kind, reason, msg string) {
	svc := p.service(key)
	if svc == nil {
		return
	}
	if !p.budget.allow(p.clk.Now(), kind, svc.Namespace, reason) {
		p.metrics.EventSummarised(reason)
		return
	}
	p.recorder.Event(svc.Reference(), kind, reason, msg)
}

// summarise posts the summary of the Events the budget left out, when
// one is due, on this node's Node object, where `kubectl describe node`
// shows it.
func (p *eventPoster) summarise(now time.Time) {
	kind, msg, ok := p.budget.summary(now)
	if !ok {
		return
	}
	p.log.Info("Events on Services summarised", "summary", msg)
	if n, err := p.nodes.Get(p.node); err == nil {
		p.recorder.Event(n, kind, "EventsSummarised", msg)
	}
}
