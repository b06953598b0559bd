package agent

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"github.com/eip-project/eip/internal/alloc"
	"github.com/eip-project/eip/internal/ipset"
	"github.com/eip-project/eip/internal/lease"
)

// Allocation of LoadBalancer addresses, without an allocator process. Every
// node computes the same answers (package alloc) from the same Services and
// locks; for each Service the node ranked first by rendezvous hash of the
// Service UID acts at once, the next one a step later, and so on, so that a
// dead or slow node delays allocation without stopping it. Acting means:
// create the lock Lease of each new address naming this node as holder and
// carrying alloc.AnnotationReservedFor (the reservation: AlreadyExists means
// taken, and the next pass chooses again), then write the Service status on
// the resourceVersion it was read at. The holder binds the address as soon
// as its cache shows the status. A reservation nobody wants any more (the
// status write lost a race, the Service went away or asks for something
// else) is an orphan lock and is deleted as such; allocator.spared keeps
// the orphan rule off reservations still wanted.

// allocator is the allocation state and its rules; only the owner loop
// calls it. It reads the configuration in force from the loop's desired
// part, handed to each call, and wants the loop woken for a full pass at
// the times its calls return.
type allocator struct {
	since     map[string]time.Time    // Service -> when this node first saw it waiting for addresses
	retry     map[string]time.Time    // Service -> no new attempt before, after a failed write
	inflight  map[string][]netip.Addr // Service -> the addresses its job in flight reserves
	written   map[string]statusWrite  // Service -> our status write, until the cache shows it
	lost      map[netip.Addr]lostRace // addresses whose reservation found a lock there
	refused   map[string]string       // Service -> the refusal last reported
	wanted    map[netip.Addr]string   // address -> the Service the last pass gave it to
	firstSeen map[string]time.Time    // reservation lock name -> when this node first saw it
	// settled maps each Service found settled to its resourceVersion, under
	// the ConfigMap version settledCfg: settledness depends on nothing else,
	// so an unchanged Service is not read again. next is the map being
	// filled by the current pass.
	settled, next map[string]string
	settledCfg    string
	// probedFree and inUse are new addresses probed before they were
	// given to a Service: when they went unanswered, and until when one
	// that a machine answered for is skipped (see candidatesFree).
	probedFree, inUse map[netip.Addr]time.Time
	jobs              chan allocJob
	results           chan allocResult
	// wake is the earliest time a rule asked for a full pass, until the
	// loop takes it (takeWake).
	wake  time.Time
	ports allocPorts
}

// allocPorts are what the allocator is given when built: where it logs,
// records Events and counts failures, who this node is, and the Service
// cache it reads.
type allocPorts struct {
	log             *slog.Logger
	recorder        record.EventRecorder
	metrics         Metrics
	node, namespace string
	services        func() []*ipset.Service
	service         func(key string) *ipset.Service
}

// lostRace is a lock this node tried to create and found, until the cache
// shows it.
type lostRace struct {
	reservedFor string // the Service the lock was reserved for, if it was
	at          time.Time
}

type statusWrite struct {
	rv string
	at time.Time
}

func newAllocator(ports allocPorts) *allocator {
	return &allocator{ports: ports,
		since: map[string]time.Time{}, retry: map[string]time.Time{}, inflight: map[string][]netip.Addr{},
		written: map[string]statusWrite{}, lost: map[netip.Addr]lostRace{}, refused: map[string]string{},
		wanted: map[netip.Addr]string{}, firstSeen: map[string]time.Time{},
		settled: map[string]string{}, next: map[string]string{},
		probedFree: map[netip.Addr]time.Time{}, inUse: map[netip.Addr]time.Time{},
		jobs: make(chan allocJob, 256), results: make(chan allocResult, 64),
	}
}

// allocJob reserves addresses for one Service, then writes its status.
type allocJob struct {
	key     string
	svc     *ipset.Service // the new status, at the resourceVersion it was read at
	reserve []*coordinationv1.Lease
	timeout time.Duration
}

type allocResult struct {
	allocJob
	created []*coordinationv1.Lease
	taken   netip.Addr // the address whose reservation already existed
	takenBy string     // the Service that lock is reserved for, if known
	out     *corev1.Service
	err     error
}

func (a *Agent) runAllocWriter(jobs <-chan allocJob, results chan<- allocResult, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case j := <-jobs:
			res := a.allocateOne(j)
			select {
			case results <- res:
			case <-stop:
				return
			}
		}
	}
}

func (a *Agent) allocateOne(j allocJob) allocResult {
	ctx, cancel := context.WithTimeout(context.Background(), j.timeout)
	defer cancel()
	res := allocResult{allocJob: j}
	for _, l := range j.reserve {
		out, err := a.opt.Leases.Create(ctx, l)
		if err != nil {
			if apierrors.IsAlreadyExists(err) {
				// Often another node reserving the same address for the
				// same Service: knowing it lets the next pass use that
				// reservation instead of making a second one.
				res.taken, _ = netip.ParseAddr(l.Annotations[lease.AnnotationIP])
				if other, gerr := a.opt.Leases.Get(ctx, l.Name); gerr == nil {
					res.takenBy = other.Annotations[alloc.AnnotationReservedFor]
				}
			}
			res.err = err
			return res
		}
		res.created = append(res.created, out)
	}
	out, err := a.patchIngress(ctx, j.svc)
	if err != nil {
		res.err = fmt.Errorf("update status of service %s: %w", j.key, err)
		return res
	}
	res.out = out
	return res
}

// patchIngress writes the load-balancer ingress of svc's status, and
// nothing else, if the Service is still at svc's resourceVersion (a
// Conflict otherwise). A merge patch rather than an update: the cache
// keeps only part of a Service (ipset.Service), and an update of status
// writes the object's labels and annotations too.
func (a *Agent) patchIngress(ctx context.Context, svc *ipset.Service) (*corev1.Service, error) {
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": svc.ResourceVersion},
		"status":   map[string]any{"loadBalancer": map[string]any{"ingress": svc.Ingress}},
	})
	if err != nil {
		return nil, err
	}
	return a.opt.Client.Services(svc.Namespace).Patch(ctx, svc.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
}

// pass is one allocation pass over the Services under d's configuration;
// locks are the cached locks by name, eachSeen walks the locks as this
// node sees them, and probe and b probe new addresses before they are
// given to a Service (candidatesFree). It returns when the loop should
// next pass in full for allocation's sake (zero: no need).
func (al *allocator) pass(v lease.View, d *desired, locks map[string]*lease.Kept, eachSeen func(func(*lease.Kept)),
	probe candidateProber, b candidateBinder) time.Time {
	al.seen(locks, v.Now)
	if !d.cfgLoaded || !v.Writable {
		return al.takeWake()
	}
	svcs := al.ports.services()
	var todo []unsettled
	refused, waiting := map[string]bool{}, map[string]bool{}
	if al.settledCfg != d.cfgRV {
		clear(al.settled)
		al.settledCfg = d.cfgRV
	}
	clear(al.next)
	for _, svc := range svcs {
		if !alloc.Wants(svc, d.cfg.LoadBalancerClass) {
			continue
		}
		k := svc.Key()
		if rv, ok := al.settled[k]; ok && rv == svc.ResourceVersion {
			al.next[k] = rv
			continue
		}
		req, err := alloc.RequestOf(svc)
		switch {
		case err != nil:
			refused[k] = true
			al.refuse(v, svc, err.Error())
		case req.Settled(alloc.Current(svc), d.cfg, d.reserved):
			al.next[k] = svc.ResourceVersion
		default:
			todo = append(todo, unsettled{svc, req})
		}
	}
	al.settled, al.next = al.next, al.settled
	clear(al.wanted)
	if len(todo) > 0 {
		al.assign(v, d, al.space(d, svcs, eachSeen, v.Now), todo, refused, waiting, probe, b)
	}
	al.forget(waiting, refused)
	return al.takeWake()
}

// wakeAt asks for a full pass at t, or earlier if asked so already.
func (al *allocator) wakeAt(t time.Time) {
	if al.wake.IsZero() || t.Before(al.wake) {
		al.wake = t
	}
}

// takeWake is the earliest full pass asked for since the last call.
func (al *allocator) takeWake() time.Time {
	w := al.wake
	al.wake = time.Time{}
	return w
}

// unsettled is a Service whose addresses do not match what it asks for.
type unsettled struct {
	svc *ipset.Service
	req alloc.Request
}

// assign works out the addresses of the unsettled Services in todo, the
// first created first, so that every node's answers agree, and allocates
// those this node may now. It notes the Services refused and those
// waiting for their addresses.
func (al *allocator) assign(v lease.View, d *desired, space *alloc.Space, todo []unsettled, refused, waiting map[string]bool,
	probe candidateProber, b candidateBinder) {
	slices.SortFunc(todo, func(a, b unsettled) int {
		return cmp.Or(a.svc.Created.Compare(b.svc.Created), cmp.Compare(a.req.Service, b.req.Service))
	})
	for _, w := range todo {
		current := alloc.Current(w.svc)
		res := space.Assign(w.req, current)
		for _, ip := range res.IPs {
			al.wanted[ip] = w.req.Service
		}
		if len(res.Refused) > 0 {
			refused[w.req.Service] = true
			al.refuse(v, w.svc, strings.Join(res.Refused, "; "))
		}
		if !res.Changes(current) {
			continue // refused: nothing to do until something changes
		}
		waiting[w.req.Service] = true
		if al.mayAct(v, d, w.svc) && al.candidatesFree(w.svc, res.Reserve, v.Now, d, probe, b) {
			al.dispatch(v, d, w.svc, res)
		}
	}
}

// seen notes when each reserving lock of locks (the cache's, by name) was
// first seen, at now at the latest, and forgets the locks gone.
func (al *allocator) seen(locks map[string]*lease.Kept, now time.Time) {
	for name := range al.firstSeen {
		if _, ok := locks[name]; !ok {
			delete(al.firstSeen, name)
		}
	}
	for name, l := range locks {
		if _, seen := al.firstSeen[name]; !seen && l.ReservedFor != "" {
			al.firstSeen[name] = now
		}
	}
}

// forget forgets the Services no longer waiting for their addresses, or
// no longer refused, after an allocation pass. The ranks count from when
// a Service became servable, so that nodes do not all act at once for one
// that waited for its address.
func (al *allocator) forget(waiting, refused map[string]bool) {
	for k := range al.since {
		if !waiting[k] {
			delete(al.since, k)
			delete(al.retry, k)
		}
	}
	for k := range al.refused {
		if !refused[k] {
			delete(al.refused, k)
		}
	}
}

// space is the address space as this node sees it (eachSeen walks its
// locks), its own writes in flight included.
func (al *allocator) space(d *desired, svcs []*ipset.Service, eachSeen func(func(*lease.Kept)), now time.Time) *alloc.Space {
	sp := alloc.NewSpace(d.cfg, d.reserved)
	for _, svc := range svcs {
		sp.AddService(svc)
	}
	addLock := func(l *lease.Kept) {
		if l.Err == nil {
			sp.Lock(l.IP, l.ReservedFor)
		}
	}
	eachSeen(addLock)
	for k, ips := range al.inflight {
		for _, ip := range ips {
			sp.Lock(ip, k)
		}
	}
	for ip, until := range al.inUse {
		if !now.Before(until) {
			delete(al.inUse, ip)
			continue
		}
		sp.Lock(ip, "")
	}
	for ip, l := range al.lost {
		if now.Sub(l.at) >= d.cfg.LeaseDuration {
			delete(al.lost, ip)
			continue
		}
		al.wakeAt(l.at.Add(d.cfg.LeaseDuration))
		sp.Lock(ip, l.reservedFor)
	}
	return sp
}

// Probing new addresses before they are given to a Service: a free answer
// is good for probedFreeFor, and an address a machine answered for is
// skipped for inUseFor, then probed again when it is a candidate.
const (
	probedFreeFor = 10 * time.Second
	inUseFor      = time.Minute
)

// candidatesFree says whether the new addresses ips may be given to svc:
// each was probed on the LAN (as before a bind, see addrConflicts) and
// nobody answered. It sends the probes that are due. An address that a
// machine answers for is skipped from then on (space), so the next pass
// gives svc the next free address; the Service gets a Warning event
// naming the MAC.
//
// d is the configuration in force, probe the conflicts' probes, b where
// an address would be bound and who listens for the answers. A probe
// that needs a pass later asks for it (wakeAt).
func (al *allocator) candidatesFree(svc *ipset.Service, ips []netip.Addr, now time.Time, d *desired, probe candidateProber, b candidateBinder) bool {
	al.forgetProbes(now)
	free := true
	for _, ip := range ips {
		if _, ok := al.probedFree[ip]; ok || probe.off() {
			continue
		}
		on, inRange := d.cfg.Lookup(ip)
		iface, err := b.ifaceFor(ip, on)
		if !inRange || err != nil {
			continue // not bindable either: the holder reports that
		}
		free = false
		mac, isFree, next := probe.candidate(ip, iface, b, now)
		switch {
		case mac != "":
			al.answered(svc, ip, mac, now)
		case isFree:
			al.probedAsFree(ip, now)
		}
		if !next.IsZero() {
			al.wakeAt(next)
		}
	}
	return free
}

// candidateProber probes new addresses for allocation (addrConflicts).
type candidateProber interface {
	candidate(ip netip.Addr, iface string, l claimListener, now time.Time) (mac string, free bool, next time.Time)
	off() bool
}

// candidateBinder says where an address would be bound, and listens for
// the answers to its probes (binder).
type candidateBinder interface {
	ifaceResolver
	claimListener
}

// forgetProbes forgets the free answers older than probedFreeFor at now.
func (al *allocator) forgetProbes(now time.Time) {
	for ip, at := range al.probedFree {
		if now.Sub(at) >= probedFreeFor {
			delete(al.probedFree, ip)
		}
	}
}

// answered: a machine with mac answered for ip, a new address for svc, at
// now. The address is skipped for inUseFor (space), and the Service
// told.
func (al *allocator) answered(svc *ipset.Service, ip netip.Addr, mac string, now time.Time) {
	al.inUse[ip] = now.Add(inUseFor)
	al.ports.metrics.AddressConflict()
	al.ports.log.Warn("a new address answers on the LAN; giving the Service another", "service", svc.Key(), "ip", ip, "mac", mac)
	al.ports.recorder.Event(svc.Reference(), corev1.EventTypeWarning, "AddressConflict",
		fmt.Sprintf("%s is in use on the LAN by %s: not assigned; %s assigns the next free address", ip, mac, al.ports.node))
}

// probedAsFree: nobody answered the probes of ip at now.
func (al *allocator) probedAsFree(ip netip.Addr, now time.Time) { al.probedFree[ip] = now }

// mayAct: this node may act for svc now, its turn by rank having come.
func (al *allocator) mayAct(v lease.View, d *desired, svc *ipset.Service) bool {
	k, now := svc.Key(), v.Now
	if !v.Eligible {
		return false
	}
	if _, busy := al.inflight[k]; busy {
		return false
	}
	if w, ok := al.written[k]; ok {
		if lease.Newer(w.rv, svc.ResourceVersion) && now.Sub(w.at) < d.cfg.LeaseDuration {
			al.wakeAt(w.at.Add(d.cfg.LeaseDuration))
			return false // our status write has not reached the cache yet
		}
		delete(al.written, k)
	}
	if t, ok := al.retry[k]; ok && now.Before(t) {
		al.wakeAt(t)
		return false
	}
	since, ok := al.since[k]
	if !ok {
		since, al.since[k] = now, now
	}
	at := since.Add(time.Duration(lease.RankFor(string(svc.UID), v.Self, v.Live)) * d.allocStep())
	if at.After(now) {
		al.wakeAt(at)
		return false
	}
	return true
}

// dispatch hands the writes that give svc the addresses of res to the
// allocation writers.
func (al *allocator) dispatch(v lease.View, d *desired, svc *ipset.Service, res alloc.Result) {
	now := v.Now
	k := svc.Key()
	out := *svc
	out.Ingress = ingress(svc.Ingress, res.IPs)
	job := allocJob{key: k, svc: &out, timeout: max(d.cfg.LeaseDuration, 2*time.Second)}
	node := al.ports.node
	for _, ip := range res.Reserve {
		l := lease.WithOwner(lease.NewLockLease(al.ports.namespace, ip, node, v.SuccessorOf(ip, node), []string{k}, now), k, svc.UID)
		l.Annotations[alloc.AnnotationReservedFor] = k
		job.reserve = append(job.reserve, l)
	}
	select {
	case al.jobs <- job:
		al.inflight[k] = slices.Clone(res.Reserve)
		al.ports.log.Debug("allocating", "service", k, "ip", res.IPs, "reserve", res.Reserve)
	default:
		al.wakeAt(now.Add(d.cfg.RankStep())) // the queue is full; the next pass tries again
	}
}

// ingress is the status listing ips: entries of old for those addresses
// are kept as they are, entries without an address (hostnames) too.
func ingress(old []corev1.LoadBalancerIngress, ips []netip.Addr) []corev1.LoadBalancerIngress {
	var out []corev1.LoadBalancerIngress
	for _, ing := range old {
		if ing.IP == "" {
			out = append(out, ing)
		}
	}
	vip := corev1.LoadBalancerIPModeVIP
	for _, ip := range ips {
		i := slices.IndexFunc(old, func(ing corev1.LoadBalancerIngress) bool { return ing.IP == ip.String() })
		if i >= 0 {
			out = append(out, old[i])
			continue
		}
		out = append(out, corev1.LoadBalancerIngress{IP: ip.String(), IPMode: &vip})
	}
	return out
}

// done takes the result of an allocation job at now; the loop notes the
// locks it created, and passes in full next (allocation weighs every
// Service).
func (al *allocator) done(r allocResult, d *desired, now time.Time) {
	delete(al.inflight, r.key)
	log := al.ports.log.With("service", r.key)
	for _, l := range r.created {
		log.Debug("reserved", "ip", l.Annotations[lease.AnnotationIP], "lease", l.Name)
	}
	switch {
	case r.err == nil:
		al.written[r.key] = statusWrite{rv: r.out.ResourceVersion, at: now}
		ips := make([]string, 0, len(r.out.Status.LoadBalancer.Ingress))
		for _, ing := range r.out.Status.LoadBalancer.Ingress {
			ips = append(ips, ing.IP)
		}
		log.Info("allocated", "ip", ips)
		al.ports.recorder.Event(r.out, corev1.EventTypeNormal, "IPAllocated", fmt.Sprintf("assigned %s (by %s)", strings.Join(ips, ", "), al.ports.node))
	case r.taken.IsValid():
		al.lost[r.taken] = lostRace{reservedFor: r.takenBy, at: now}
		log.Debug("address already locked; choosing again", "ip", r.taken, "reservedFor", r.takenBy)
	case apierrors.IsConflict(r.err) || apierrors.IsNotFound(r.err):
		log.Debug("service changed while allocating; choosing again", "err", r.err)
	default:
		al.ports.metrics.APIError("allocate")
		log.Warn("allocation failed; trying again later", "err", r.err)
		al.retry[r.key] = now.Add(d.cfg.LeaseDuration)
	}
}

// refuse logs what a Service cannot have, and records it as a Warning
// event when it changed. Only the node ranked first for the Service
// records the event, so that a cluster does not repeat it once per node.
func (al *allocator) refuse(v lease.View, svc *ipset.Service, msg string) {
	k := svc.Key()
	if al.refused[k] == msg {
		return
	}
	al.refused[k] = msg
	al.ports.log.Warn("cannot allocate", "service", k, "reason", msg)
	if lease.RankFor(string(svc.UID), v.Self, v.Live) == 0 {
		al.ports.recorder.Event(svc.Reference(), corev1.EventTypeWarning, "AllocationFailed", truncate(msg, 1000))
	}
}

// spared: l is a reservation that the orphan rule must leave alone: the
// last allocation pass gives its address to the Service it was made for,
// or that Service is not in this node's cache and the reservation is
// young. While it is spared for its youth, wake is when it stops being.
func (al *allocator) spared(l *lease.Kept, d *desired, now time.Time) (spared bool, wake time.Time) {
	k := l.ReservedFor
	if k == "" {
		return false, time.Time{}
	}
	if al.wanted[l.IP] == k {
		return true, time.Time{}
	}
	if al.ports.service(k) != nil {
		return false, time.Time{}
	}
	// The grace counts from the first sighting, whichever pass made it: an
	// incremental pass may meet a reservation before allocate does.
	first, ok := al.firstSeen[l.Name]
	if !ok {
		first = now
		al.firstSeen[l.Name] = now
	}
	if now.Sub(first) < d.reservationGrace() {
		return true, first.Add(d.reservationGrace())
	}
	return false, time.Time{}
}
