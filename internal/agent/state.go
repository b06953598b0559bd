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

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/eip-project/eip/internal/bgp"
	"github.com/eip-project/eip/internal/config"
	"github.com/eip-project/eip/internal/ipset"
	"github.com/eip-project/eip/internal/lanlive"
	"github.com/eip-project/eip/internal/lease"
	"github.com/eip-project/eip/internal/netif"
	"github.com/eip-project/eip/internal/policy"
)

// binding is an address this node has put on an interface.
type binding struct {
	iface    string // where it is announced and probed
	dev      string // where the address is: iface, or eipd's device
	missing  bool   // removed by someone else and not restored yet
	prefix   netip.Prefix
	announce config.Announce
	route    bgp.Route // announced when announce.BGP()
}

// managed is an IP that a Service names, and the name of its lock: a full
// pass reads every lock by name, and naming each IP anew allocated tens of
// thousands of strings a pass at 10,000 IPs.
type managed struct {
	ip   netip.Addr
	name string
}

// state is everything the owner loop knows. Only the loop touches it.
type state struct {
	a   *Agent
	log *slog.Logger

	cfg       config.Config
	cfgLoaded bool   // a good configuration is in force
	cfgErr    string // why the current ConfigMap is not in force
	cfgRV     string // resourceVersion of the ConfigMap last parsed
	cfgGone   bool   // the ConfigMap was deleted after a good one was loaded

	entries   map[netip.Addr]ipset.Entry
	order     []managed
	preferred map[netip.Addr][]string
	reserved  map[netip.Addr]string
	rejected  map[string]bool // "svc ip reason" already reported

	live      *lease.Liveness
	bound     map[netip.Addr]binding
	freeSince map[netip.Addr]time.Time
	inflight  map[string]bool
	pending   map[string]string // lock name -> the holder an ownership write in flight names
	// written are this node's successful lock writes until the cache
	// shows them (effective); seen is the Leases' cache's progress, read
	// before the cache's copies that a pass compares with them.
	written  map[string]*coordinationv1.Lease
	seen     string
	deleted  map[string]string // lock name -> resourceVersion we deleted
	badLocks map[string]string // lock name -> resourceVersion already warned about

	lastRenewOK time.Time // when the last successful renewal was sent
	// lastRenewFor is the lease duration that renewal wrote.
	lastRenewFor time.Duration
	// lastRenewAsked is when the heartbeat writer last took a renewal,
	// lastAsked that renewal.
	lastRenewAsked time.Time
	lastAsked      renewal
	renewFailing   bool
	// renewFails counts the renewals that failed in a row, the last one
	// at renewFailedAt (see renewBackoff).
	renewFails    int
	renewFailedAt time.Time
	needBarrier   bool      // bind nothing new until a renewal sent after the break comes back
	barrier       time.Time // wall time of that renewal
	// lastTick is when the loop last ticked; stalled says that a tick came
	// late and the locks were not re-read since (loopLate), stallAt when.
	lastTick, stallAt time.Time
	stalled           bool
	// lateBinds are held IPs not bound because the loop was late; its
	// next tick on time decides them again.
	lateBinds map[netip.Addr]bool
	// ownRemovals counts, per IP, the removals this node made whose
	// address events have not come back yet (see addrEvent).
	ownRemovals map[netip.Addr]int
	linkDown    map[string]bool
	claimWatch  map[string]context.CancelFunc
	claimed     *claimedSet
	autoIface   map[netip.Addr]string // "auto" resolved, see ifaceFor
	arpAnswers  map[string]bool       // per LAN interface, see placeOnDevice
	macs        string                // ownMACs; "" until listed, and after a link changed
	fenced      bool
	shutting    bool
	routerErr   string // why the route-mode configuration was refused
	bgpSessions string // lease.FormatBGPSessions of the sessions, for the heartbeat
	sessions    map[netip.Addr]sessionSeen
	routes      int // routes announced

	selfEligible bool
	// peersKnownAt: until then this node has not watched heartbeats for a
	// renew interval since it (re)connected, so it may not know every live
	// peer, nor its rank among them, and races for no IP.
	peersKnownAt time.Time
	acquiring    int // Create and Acquire writes in flight, see dispatch
	dropping     int // writes in flight whose IP was unbound first, see drop
	// window is how many acquisitions may be in flight (congestion);
	// below one, one at a time, none before paceUntil. idleSince is when
	// the last acquisition in flight came back, or the last pause ended
	// (windowAt). sent numbers
	// the acquisitions sent, and cut is the first sent after the window
	// was last narrowed.
	window               float64
	paceUntil, idleSince time.Time
	sent, cut            int
	// dropWaiting are the bound IPs whose hand-off or delete waits for
	// one of those (drop).
	dropWaiting map[netip.Addr]bool
	selfReason  string

	dirtySvc, dirtyNodes, dirtyCM bool
	wake                          time.Time
	lastResync                    time.Time
	// lastPass is when the last full pass ran and passVerdicts what it
	// read of each node; passWritable is whether this node could write at
	// the last pass, full or not (see passDue), and fullUnwritable whether
	// it could not at the last full one, which then allocated nothing and
	// collected no heartbeat.
	lastPass       time.Time
	passWritable   bool
	fullUnwritable bool
	passVerdicts   map[string]verdict
	// writableDeps are the IPs whose last decision depends on whether
	// this node may write: a change of that decides only them again
	// (writableChanged).
	writableDeps map[netip.Addr]bool

	// The incremental pass (see pass): needFull says an input since the
	// last pass changed something every IP reads; hbDirty that a
	// heartbeat was renewed. dirty are the IPs whose lock, write or
	// address changed, names maps each managed IP's lock name to it.
	// ipWake holds each IP's own decision time (ipWakeMin the earliest),
	// and waiting the acquisitions decided while all were in flight,
	// each with whether it goes first (see reconcile).
	needFull, hbDirty bool
	dirty             map[netip.Addr]bool
	names             map[string]netip.Addr
	ipWake            map[netip.Addr]time.Time
	ipWakeMin         time.Time
	waiting           waitQueue
	deciding          netip.Addr // the IP whose decision wakeAt times, if valid
	// first says, per IP of order, whether the last full pass decided it
	// among those that go first (reconcile); kept for the next one.
	first []bool
	// read is the lock being decided (lockOf): one for the loop, which
	// decides one IP at a time, where a lock read by each decision was
	// 10,000 allocations a full pass (lease.Decide's results hold what
	// it is given, so the compiler cannot keep one on the stack).
	read lease.Lock

	renewReq  chan renewal
	renewRes  chan renewResult
	jobs      chan write
	results   chan writeResult
	claims    chan netif.Claim
	hb        *heartbeater
	alloc     *allocator
	lifetime  *keeper
	watch     *watchdog
	conflicts addrConflicts
	events    *eventBudget

	// Liveness over the LAN (lan.go): the socket and its port, what
	// arrives on it (read by the speaker, lanspeaker.go, which also
	// sends), and whether a peer no longer hears this node (and when it
	// may stop hearing it).
	lanConn   LANConn
	lanPort   uint16
	lanIn     chan lanlive.Received
	speaker   *speaker
	unheard   bool
	unheardAt time.Time
	// slowUntil: until then the watch is judged at the pace of slow
	// heartbeats (setLANTimings).
	slowUntil time.Time
}

func newState(a *Agent) *state {
	s := &state{
		a: a, log: a.log,
		cfg:          config.Default(),
		window:       min(slowStart, float64(a.opt.Writers)),
		entries:      map[netip.Addr]ipset.Entry{},
		rejected:     map[string]bool{},
		bound:        map[netip.Addr]binding{},
		freeSince:    map[netip.Addr]time.Time{},
		inflight:     map[string]bool{},
		pending:      map[string]string{},
		written:      map[string]*coordinationv1.Lease{},
		deleted:      map[string]string{},
		badLocks:     map[string]string{},
		linkDown:     map[string]bool{},
		claimWatch:   map[string]context.CancelFunc{},
		claimed:      newClaimedSet(),
		autoIface:    map[netip.Addr]string{},
		arpAnswers:   map[string]bool{},
		dirty:        map[netip.Addr]bool{},
		lateBinds:    map[netip.Addr]bool{},
		ownRemovals:  map[netip.Addr]int{},
		names:        map[string]netip.Addr{},
		ipWake:       map[netip.Addr]time.Time{},
		waiting:      newWaitQueue(),
		dropWaiting:  map[netip.Addr]bool{},
		writableDeps: map[netip.Addr]bool{},
		needBarrier:  true,
		dirtySvc:     true, dirtyNodes: true, dirtyCM: true,
		renewReq:  make(chan renewal, 1),
		renewRes:  make(chan renewResult, 1),
		jobs:      make(chan write, 4096),
		results:   make(chan writeResult, 64),
		claims:    make(chan netif.Claim, 64),
		lanIn:     make(chan lanlive.Received, 256),
		hb:        &heartbeater{a: a},
		alloc:     newAllocator(),
		conflicts: newAddrConflicts(),
		events:    newEventBudget(a.clk.Now()),
		watch:     newWatchdog(a.clk, a.opt.Hung),
	}
	s.lifetime = newKeeper(a.log, a.clk, a.opt.Addresser, a.opt.Metrics.RefreshLate, s.watch.quiet)
	s.speaker = newSpeaker(a.opt.Node, a.clk, a.log, s.watch, s.sentBy)
	return s
}

func (s *state) run(ctx context.Context, stop chan struct{}) error {
	go s.hb.run(s.renewReq, s.renewRes, stop)
	for range s.a.opt.Writers {
		go s.a.runWriter(s.jobs, s.results, stop)
	}
	s.startAllocator(stop)
	s.loadConfig()
	s.lifetime.configure(s.cfg)
	go s.lifetime.run(stop)
	go s.watch.run(stop)
	s.live = lease.NewLiveness(s.a.opt.Node, s.cfg.RenewInterval, 2*s.cfg.RenewInterval)
	s.configureLAN()
	go s.speaker.run(s.lanIn, stop)
	ticker := s.a.clk.NewTicker(s.cfg.RenewInterval)
	interval := s.cfg.RenewInterval
	timer := s.a.clk.NewTimer(time.Hour)
	s.reconcile()
	s.resync(true)
	s.requestRenew()
	close(s.a.readyCh)
	for {
		pass := true
		select {
		case <-ctx.Done():
			ticker.Stop()
			timer.Stop()
			s.watch.disarm()
			return s.shutdown()
		case <-s.a.svcKick:
			s.dirtySvc = true
		case <-s.a.nodeKick:
			s.dirtyNodes = true
		case <-s.a.leaseKick:
		case <-s.a.hbKick:
			pass = s.heartbeatEvent()
		case <-s.a.cmKick:
			s.dirtyCM = true
		case <-ticker.C():
			s.tick()
			pass = s.passDue(s.a.clk.Now())
		case r := <-s.renewRes:
			s.renewed(r)
			pass = s.passDue(s.a.clk.Now())
		case w := <-s.results:
			s.writeDone(w)
		case r := <-s.alloc.results:
			s.allocDone(r)
		case ev := <-s.a.opt.AddrEvents:
			// It restores what it can at once; what a late loop may
			// not, its next tick on time decides again (lateBinds).
			s.addrEvent(ev)
			pass = false
		case ev := <-s.a.opt.LinkEvents:
			s.linkEvent(ev)
		case c := <-s.claims:
			pass = s.claim(c)
		case <-s.speaker.kick:
			pass = s.takeDatagrams()
		case <-timer.C():
			pass = s.checkUnheard(s.a.clk.Now()) || s.passDue(s.a.clk.Now())
		}
		s.watch.progressed(s.a.clk.Now())
		if pass {
			s.drain(ticker.C())
			s.pass()
		}
		if s.cfg.RenewInterval != interval {
			ticker.Stop()
			interval = s.cfg.RenewInterval
			ticker = s.a.clk.NewTicker(interval)
		}
		timer.Stop()
		if next := s.nextWake(s.a.clk.Now()); !next.IsZero() {
			timer.Reset(max(next.Sub(s.a.clk.Now()), time.Millisecond))
		}
	}
}

// drainLimit bounds the inputs one reconcile pass answers, so that a flood
// cannot hold the pass (and the heartbeat it requests) back for long.
const drainLimit = 1024

// drain handles the inputs that are already waiting, without blocking, so
// that one reconcile pass answers a burst of them: a thousand lock writes
// coming back at a cold start, a lease event per write, an address event
// per binding. A pass costs the same for one input as for a thousand.
func (s *state) drain(tick <-chan time.Time) {
	for range drainLimit {
		select {
		case <-s.a.svcKick:
			s.dirtySvc = true
		case <-s.a.nodeKick:
			s.dirtyNodes = true
		case <-s.a.leaseKick:
		case <-s.a.hbKick:
			s.hbDirty = true
		case <-s.a.cmKick:
			s.dirtyCM = true
		case <-tick:
			s.tick()
		case r := <-s.renewRes:
			s.renewed(r)
		case w := <-s.results:
			s.writeDone(w)
		case r := <-s.alloc.results:
			s.allocDone(r)
		case ev := <-s.a.opt.AddrEvents:
			s.addrEvent(ev)
		case ev := <-s.a.opt.LinkEvents:
			s.linkEvent(ev)
		case c := <-s.claims:
			s.claim(c)
		case <-s.speaker.kick:
			s.takeDatagrams()
		default:
			return
		}
	}
}

// writable: this node may write locks. Its renewals succeed and its cache
// has caught up with its own latest heartbeat since the last break.
func (s *state) writable(now time.Time) bool {
	return s.cfgLoaded && s.apiOK(now) && !s.needBarrier && s.live.SelfSeenSince(s.barrier) && s.live.Connected(now)
}

// apiOK: the last renewal succeeded, recently enough: within half of the
// duration it was renewed with (a slow heartbeat lasts renewFactor lease
// durations). Judged against the fast pace alone, a node on slow
// heartbeats could write and bind only in the second after each renewal,
// and a takeover or a hand-off would wait for the next one. Judged against
// the pace of now, a node that just lost a peer (and so renews fast again)
// could not take over from it until its next renewal: the survivor that
// ticked first after the verdict took every IP, ranks notwithstanding.
func (s *state) apiOK(now time.Time) bool {
	return !s.renewFailing && !s.lastRenewOK.IsZero() && now.Sub(s.lastRenewOK) <= s.lastRenewFor/2
}

// mayBeJudgedDead reports whether a peer may have judged this node dead by
// now and taken its IPs over: peers report not hearing it over the LAN,
// or the last renewal the API server took was sent a whole lease duration
// ago (the duration it wrote). A peer times that duration from when its
// watch showed the renewal, which is after it was sent, so no peer judges
// this node dead by its heartbeat any sooner.
func (s *state) mayBeJudgedDead(now time.Time) bool {
	return s.unheard || s.lastRenewOK.IsZero() || now.Sub(s.lastRenewOK) >= s.lastRenewFor
}

func (s *state) requestRenew() {
	r := s.renewal()
	select {
	case s.renewReq <- r:
		s.lastRenewAsked, s.lastAsked = s.a.clk.Now(), r
	default: // the previous renewal is still in flight
	}
}

// idleRenewFactor: a node that may hold no IP and holds none renews its
// heartbeat this many times less often, with a duration as many times
// longer. Nobody takes over from it, so its liveness only feeds `kubectl
// eip status`; every renewal costs a write and one watch event for every
// node. In a rack of fifty nodes of which five may hold IPs, it takes
// eip's writes from 100/s to 19/s and the watch events from 5,000/s to
// 950/s (docs/benchmarks.md).
const idleRenewFactor = 10

// idle: this node may hold no IP, holds none and writes none.
func (s *state) idle() bool {
	return !(s.selfEligible && !s.shutting) && len(s.bound) == 0 && len(s.inflight) == 0
}

// renewal is the heartbeat renewal this node's state asks for now.
func (s *state) renewal() renewal {
	conflicts, claims := s.conflicts.report(s.a.clk.Now())
	r := renewal{
		status: lease.HeartbeatStatus{Eligible: s.selfEligible && !s.shutting, Error: s.statusError(), Held: len(s.bound), BGP: s.bgpSessions,
			MACs: s.ownMACs(), Conflicts: conflicts, Claims: claims, LivenessPort: s.lanPort},
		// Neither the duration nor the timeout may be shorter than what
		// peers need to see the renewal; a renewal slower than half a
		// lease is a failure as far as holding addresses goes.
		duration: s.cfg.LeaseDuration,
		timeout:  max(s.cfg.LeaseDuration/2, s.cfg.RenewInterval),
	}
	factor := s.renewFactor(s.a.clk.Now())
	r.duration *= time.Duration(factor)
	// A slow heartbeat lasts factor lease durations, and nobody judges
	// this node by it within one: its renewal may take half its own
	// period. Held to half a lease, renewals that a loaded API server
	// applied in a second and a half failed (150 a minute at fifty
	// nodes), were written again, and met a newer version.
	r.timeout = max(r.timeout, time.Duration(factor)*s.cfg.RenewInterval/2)
	return r
}

// maxRenewBackoff bounds, in renew intervals, how long a node on slow
// heartbeats waits before it writes a failed renewal again.
const maxRenewBackoff = 4

// renewBackoff is how long after a failed renewal a node on slow heartbeats
// (factor > 1) writes it again: one renew interval after the first failure,
// then twice as long after each further one, up to maxRenewBackoff renew
// intervals. Its heartbeat lasts factor lease durations from the last
// renewal that succeeded, and its peers hear it over the LAN meanwhile;
// until one succeeds it binds nothing new. Written again every renew
// interval, the renewals of fifty nodes added a write a second each to the
// load that made them fail. Renewed every renew interval (factor 1), a
// node's liveness rests on its heartbeat: it tries again at every tick.
func (s *state) renewBackoff(factor int) time.Duration {
	if factor == 1 || s.renewFails == 0 {
		return 0
	}
	wait := s.cfg.RenewInterval
	for range s.renewFails - 1 {
		wait = min(2*wait, maxRenewBackoff*s.cfg.RenewInterval)
	}
	return wait
}

// renewFactor is how many renew intervals this node's heartbeat lasts: one,
// or more when nobody needs it renewed often: the node is idle, or its
// liveness goes over the LAN (lanSlow).
func (s *state) renewFactor(now time.Time) int {
	switch {
	case s.lanSlow(now):
		return s.slowFactor()
	case s.idle():
		return idleRenewFactor
	}
	return 1
}

// renewDue: the tick renews every renew interval, a slow heartbeat every
// renewFactor of them, and any node at once when what it says of itself
// changed (it became eligible, say) or when the duration it last wrote
// runs out before the next renewal at this pace could come.
//
// Both are judged against the renewal last asked for, not the heartbeat in
// the cache. The cache shows a renewal only once the watch delivers it:
// on a loaded API server that took longer than a tick, and every tick
// meanwhile wrote the same change again (up to three writes a node for
// each). And a duration that merely differs is no reason to write: the
// slow factor changes with the number of nodes, and rewriting every
// heartbeat whenever it did cost a write per node for every second node
// that joined beyond twenty, N (N − 20) / 2 writes or more at a cold start
// (fifty nodes joining in a minute wrote 17 heartbeats a second, against
// 4 once all had joined).
func (s *state) renewDue(now time.Time) bool {
	factor := s.renewFactor(now)
	if s.renewFailing {
		return now.Sub(s.renewFailedAt) >= s.renewBackoff(factor)-s.cfg.RenewInterval/2
	}
	if factor == 1 || s.lastRenewAsked.IsZero() {
		return true
	}
	period := time.Duration(factor) * s.cfg.RenewInterval
	want := s.renewal()
	if !sameStatus(want.status, s.lastAsked.status) || s.lastAsked.duration < period+want.timeout {
		return true
	}
	return now.Sub(s.lastRenewAsked) >= period-s.cfg.RenewInterval/2
}

// sameStatus: a and b say the same of the node but for the IPs it holds,
// which only `kubectl eip status` reads: it changes with every bind, and
// waits for the next renewal.
func sameStatus(a, b lease.HeartbeatStatus) bool {
	a.Held, b.Held = 0, 0
	return a == b
}

func (s *state) statusError() string {
	var parts []string
	if s.cfgErr != "" {
		parts = append(parts, s.cfgErr)
	}
	if s.routerErr != "" {
		parts = append(parts, s.routerErr)
	}
	if !s.selfEligible && s.selfReason != "" {
		parts = append(parts, s.selfReason)
	}
	if s.shutting {
		parts = append(parts, "shutting down")
	}
	return strings.Join(parts, "; ")
}

func (s *state) renewed(r renewResult) {
	if r.err != nil {
		if !s.renewFailing {
			s.log.Warn("heartbeat renewal failed; holding what is bound, binding nothing new", "err", r.err, "lease", lease.HeartbeatName(s.a.opt.Node))
		}
		s.renewFailing, s.needBarrier = true, true
		s.renewFails++
		s.renewFailedAt = s.a.clk.Now()
		s.a.opt.Metrics.APIError("renew")
		return
	}
	s.a.opt.Metrics.Renewed(r.took)
	if s.renewFailing {
		s.log.Info("heartbeat renewed again; re-reading locks before binding anything new")
	}
	if s.needBarrier && !r.sent.Before(s.stallAt) {
		s.barrier = r.sent.Round(0).Truncate(time.Microsecond)
		s.needBarrier = false
		s.peersKnownAt = r.sent.Add(s.cfg.RenewInterval)
	}
	s.renewFailing, s.renewFails = false, 0
	s.lastRenewOK, s.lastRenewFor = r.sent, r.duration
}

// tick runs every renew interval: have the address lifetimes refreshed
// (see keeper), renew the heartbeat, and now and then resync.
func (s *state) tick() {
	now := s.a.clk.Now()
	if !s.lastTick.IsZero() && now.Sub(s.lastTick) > s.stallAfter() {
		// Stalled: peers may judge this node dead before they see the
		// renewal this tick sends. Bind nothing until that renewal came
		// back through the watch, with every lock change made before it
		// (what is bound stays: a taker's probe waits for it to go).
		if !s.stalled {
			s.log.Warn("the loop stalled; re-reading the locks before binding or refreshing anything", "since", now.Sub(s.lastTick))
		}
		s.stalled, s.stallAt, s.needBarrier = true, now, true
	}
	s.lastTick = now
	s.watch.progressed(now)
	if !s.loopLate(now) {
		s.lifetime.loopTicked()
		for ip := range s.lateBinds {
			s.dirty[ip] = true
		}
		clear(s.lateBinds)
	}
	s.postSummary(now)
	s.observeSessions()
	s.takeDatagrams()
	s.tellSpeaker()
	s.setLANTimings()
	// A stalled loop renews at once, slow heartbeat or not: it binds
	// nothing until a renewal sent since comes back.
	if s.renewDue(now) || s.stalled && s.needBarrier {
		s.requestRenew()
	}
	if now.Sub(s.lastResync) >= s.a.opt.Resync {
		s.resync(false)
	}
}

// passDue says whether the renew tick, the result of a renewal or the
// timer needs a reconcile pass. None of them changes a lock, a Service or a
// heartbeat in the cache: those wake the loop themselves. What a pass reads
// that changes with time alone is a decision's own time (s.wake: a rank's
// turn, fence-after, an allocation's retry), the end of a pause between
// acquisitions (paceUntil, see congestion), a node's verdict (seen
// renewing, judged dead), and whether this node may write (a renewal failed
// or came back, the watch went quiet); the last two are compared with the
// last pass. A full pass every resync period stays as a safety net. At
// 10,000 IPs a pass costs tens of milliseconds, and ticks and renewals came
// four times a second.
func (s *state) passDue(now time.Time) bool {
	return !s.wake.IsZero() && !now.Before(s.wake) ||
		!s.ipWakeMin.IsZero() && !now.Before(s.ipWakeMin) || len(s.dirty) > 0 ||
		!s.paceUntil.IsZero() && !now.Before(s.paceUntil) ||
		s.writable(now) != s.passWritable ||
		!maps.Equal(s.passVerdicts, s.verdicts(now)) ||
		now.Sub(s.lastPass) >= s.a.opt.Resync
}

// nextWake is when the timer should wake the loop: a decision's time, the
// end of a pause between acquisitions, or the next moment a node's verdict
// changes if no heartbeat does.
func (s *state) nextWake(now time.Time) time.Time {
	expiry, _ := s.live.NextExpiry(now)
	next := s.wake
	for _, t := range []time.Time{s.ipWakeMin, expiry, s.unheardAt, s.paceUntil} {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	return next
}

// fence, with api-loss=fence, unbinds everything once fence-after has
// passed since the last successful renewal was sent, and until then wakes
// the loop exactly when it will have: waiting for the next tick could fence
// up to a renew interval late, which is the whole default margin between
// fence-after and the moment a peer may judge this node dead.
func (s *state) fence(now time.Time) {
	if s.cfg.APILoss != config.APILossFence || len(s.bound) == 0 || s.lastRenewOK.IsZero() {
		return
	}
	if !lease.Fenced(s.lastRenewOK, now, s.cfg.FenceAfter) {
		s.wakeAt(s.lastRenewOK.Add(s.cfg.FenceAfter))
		return
	}
	if s.apiOK(now) {
		return
	}
	s.log.Warn("fencing: no successful renewal within fence-after; unbinding everything", "fenceAfter", s.cfg.FenceAfter)
	s.a.opt.Metrics.Fenced()
	for ip := range s.bound {
		s.event(ip, corev1.EventTypeWarning, "Fenced", fmt.Sprintf("unbound %s from %s: API server unreachable (api-loss=fence)", ip, s.a.opt.Node))
		s.unbind(ip, "fenced")
	}
	s.fenced = true
}

// pass answers the inputs handled since the last one. Only a change of
// something every IP reads needs a pass over every IP (reconcile): the
// configuration, a Service or a Node, a node's verdict, whether this node
// may write, a time the pass itself set, the policy spread (whose plan
// weighs every IP against the others), and the resync period. Otherwise
// only the IPs whose lock, write or address changed, or whose own
// decision time came, are decided again (reconcileSome): at 10,000 IPs a
// full pass costs tens of milliseconds, and at a cold start or a mass
// failover every few write results asked for one.
func (s *state) pass() {
	now := s.a.clk.Now()
	if !now.Before(s.paceUntil) {
		// The acquisitions waiting for it are decided below, and a quiet
		// spell (windowAt) counts from its end.
		s.idleSince = later(s.idleSince, s.paceUntil)
		s.paceUntil = time.Time{}
	}
	delivered := s.takeLockChanges()
	if s.hbDirty || delivered {
		s.hbDirty = false
		s.needFull = s.heartbeatsRenewed() || s.needFull
	}
	if delivered {
		// The watch that carries the heartbeats delivered a Lease, and
		// every heartbeat the cache held after it was just observed.
		s.live.Delivered(now)
	}
	if w := s.writable(now); w != s.passWritable {
		s.writableChanged(w)
	}
	if s.fullDue(now) {
		s.reconcile()
		return
	}
	s.reconcileSome(now)
}

func (s *state) fullDue(now time.Time) bool {
	return s.needFull || s.dirtySvc || s.dirtyNodes || s.dirtyCM || s.cfg.Policy == config.PolicySpread ||
		!s.wake.IsZero() && !now.Before(s.wake) ||
		!maps.Equal(s.passVerdicts, s.verdicts(now)) ||
		now.Sub(s.lastPass) >= s.a.opt.Resync
}

// writableChanged answers a change of whether this node may write: the
// IPs whose decision depends on it are decided again, not every IP. Most
// do not: a held and bound IP stays, a live peer's stays with it. At
// 10,000 IPs a full pass took a second on the loaded test bed during a
// mass failover; the renewal its tick sent meanwhile came back too late
// to keep this node writable, which asked for another full pass, and the
// next renewal for one more: the survivors spent the failover in full
// passes, and dispatched one window of takeovers between two of them.
// A stall ends when this node may write again (see tick), so the IPs a
// late loop did not bind are decided again then too. Allocation and
// collecting heartbeats happen in full passes alone: one that ran while
// this node could not write is run again once it can.
func (s *state) writableChanged(w bool) {
	s.passWritable = w
	for ip := range s.writableDeps {
		s.dirty[ip] = true
	}
	clear(s.writableDeps)
	if !w {
		return
	}
	for ip := range s.lateBinds {
		s.dirty[ip] = true
	}
	clear(s.lateBinds)
	if s.fullUnwritable {
		s.needFull = true
	}
}

// takeLockChanges marks dirty the IPs of the locks the informer saw
// change since the last pass, and says whether it saw any Lease change.
func (s *state) takeLockChanges() bool {
	names, all := s.a.takeLeaseChanges()
	s.needFull = s.needFull || all
	for name := range names {
		if ip, ok := s.names[name]; ok {
			s.dirty[ip] = true
			continue
		}
		l := s.cachedLock(name)
		if l == nil {
			// An orphan's lock is gone: nothing is left to decide for its
			// IP, but a Service's allocation may have waited for it to be
			// released, and only the full pass allocates.
			s.needFull = true
			continue
		}
		if lk, err := lease.ParseLock(l); err == nil {
			s.dirty[lk.IP] = true
		} else {
			s.needFull = true // the full pass warns about it
		}
	}
	return all || len(names) > 0
}

// cachedLock is the lock Lease named name in the cache, or nil.
func (s *state) cachedLock(name string) *coordinationv1.Lease {
	l := s.a.lease(name)
	if l == nil || l.Labels[lease.RoleLabel] != lease.RoleLock {
		return nil
	}
	return l
}

// reconcileSome decides again the dirty IPs, those whose own decision
// time came, and as many waiting acquisitions as there is room for, those
// that go first first. TestIncrementalPassDecidesAsTheFullPass checks that a full pass
// after it would act not at all.
func (s *state) reconcileSome(now time.Time) {
	s.seen = s.a.leasesSeen()
	s.fence(now)
	v := s.view(now)
	if v.Writable {
		s.fenced = false
		s.stalled = false
	}
	s.ipWakeMin = time.Time{}
	for ip, at := range s.ipWake {
		if !now.Before(at) {
			s.dirty[ip] = true
			delete(s.ipWake, ip)
		} else if s.ipWakeMin.IsZero() || at.Before(s.ipWakeMin) {
			s.ipWakeMin = at
		}
	}
	// In the order of the IPs, so that the writes a pass makes depend on
	// its inputs alone, not on the order of a map.
	for _, ip := range slices.SortedFunc(maps.Keys(s.dirty), netip.Addr.Compare) {
		s.decideOne(v, ip, now)
	}
	clear(s.dirty)
	for _, first := range []bool{true, false} {
		s.waiting.each(first, func(ip netip.Addr) bool {
			if s.acquisitionsFull(now) {
				return false
			}
			s.decideOne(v, ip, now)
			return true
		})
	}
	s.a.opt.Metrics.Held(len(s.bound))
}

// decideOne decides one IP as the full pass would.
func (s *state) decideOne(v lease.View, ip netip.Addr, now time.Time) {
	name := lease.NameFor(ip)
	cached := s.cachedLock(name)
	if _, named := s.entries[ip]; named {
		l := s.effective(name, cached)
		s.decide(v, ip, name, l, true, s.planOne(v, ip, name, l))
		return
	}
	s.waiting.remove(ip)
	delete(s.ipWake, ip)
	if cached != nil {
		s.decideOrphan(v, cached, now)
	} else if _, bound := s.bound[ip]; bound {
		s.unbind(ip, "not named by any Service")
	}
}

// decideOrphan decides the lock l of an IP no Service names.
func (s *state) decideOrphan(v lease.View, l *coordinationv1.Lease, now time.Time) {
	if l = s.effective(l.Name, l); l == nil {
		return
	}
	lk, err := lease.ParseLock(l)
	if err != nil {
		s.warnBadLock(l, err, "no Service names its IP, so it is ignored")
		return
	}
	if s.reservationSpared(l, lk.IP, now) {
		return
	}
	s.decide(v, lk.IP, l.Name, l, false, "")
}

// reconcile is one pass over everything; it is idempotent.
func (s *state) reconcile() {
	now := s.a.clk.Now()
	s.seen = s.a.leasesSeen()
	s.wake = time.Time{}
	s.needFull = false
	// Emptied by new maps, not cleared, and the others shrunk: see shrink.
	s.dirty, s.dropWaiting, s.lateBinds = map[netip.Addr]bool{}, map[netip.Addr]bool{}, map[netip.Addr]bool{}
	s.waiting = newWaitQueue()
	s.ipWake = map[netip.Addr]time.Time{}
	s.ipWakeMin = time.Time{}
	s.freeSince = shrink(s.freeSince)
	s.written = shrink(s.written)
	s.claimed.keepOnly(func(ip netip.Addr) bool {
		_, probing := s.conflicts.probing[ip]
		_, bound := s.bound[ip]
		return probing || bound
	})
	s.writableDeps = map[netip.Addr]bool{}
	s.fence(now)
	changed := false
	if s.dirtyCM {
		s.dirtyCM = false
		changed = s.loadConfig()
		s.lifetime.configure(s.cfg)
		s.configureLAN()
	}
	all := s.a.allLeases()
	locks := s.observe(all, now)
	if s.dirtyNodes {
		reserved := s.reservedAddresses()
		if s.reserved != nil && !maps.Equal(reserved, s.reserved) {
			// A range may now contain an address never to be bound: the
			// ConfigMap is checked again, and refused if so.
			s.cfgRV = ""
			changed = s.loadConfig() || changed
		}
		s.reserved = reserved
	}
	if s.dirtySvc || s.dirtyNodes || changed {
		s.computeEntries()
		s.dirtySvc = false
	}
	if s.dirtyNodes || changed {
		s.configureRouter()
	}
	s.dirtyNodes = false
	s.updateEligibility()
	v := s.view(now)
	s.lastPass, s.passWritable, s.fullUnwritable = now, v.Writable, !v.Writable
	if v.Writable {
		s.fenced = false
		s.stalled = false
	}
	plan := s.plan(v, locks)
	s.allocate(v, locks)

	// Acquisitions in flight are bounded (see dispatch), so the IPs the
	// policy gives this node, or free ones it ranks first for, go first:
	// it races for the others' only once its own are under way.
	s.first = slices.Grow(s.first[:0], len(s.order))[:len(s.order)]
	for i, m := range s.order {
		var holder string
		if l := locks[m.name]; l != nil && l.Spec.HolderIdentity != nil {
			holder = *l.Spec.HolderIdentity
		}
		s.first[i] = goesFirst(v, m.ip, holder, plan[m.ip])
	}
	for _, first := range []bool{true, false} {
		for i, m := range s.order {
			if s.first[i] == first {
				s.decide(v, m.ip, m.name, s.effective(m.name, locks[m.name]), true, plan[m.ip])
			}
		}
	}
	// In the order listed, not the map's: see reconcileSome.
	for _, l := range all {
		if _, named := s.names[l.Name]; !named && l.Labels[lease.RoleLabel] == lease.RoleLock {
			s.decideOrphan(v, l, now)
		}
	}
	for ip := range s.bound {
		if _, named := s.entries[ip]; !named {
			if _, locked := locks[lease.NameFor(ip)]; !locked {
				s.unbind(ip, "not named by any Service")
			}
		}
	}
	if v.Writable {
		s.collectHeartbeats(v, all)
	}
	s.passVerdicts = s.verdicts(now)
	s.a.opt.Metrics.Held(len(s.bound))
	s.a.opt.Metrics.Managed(len(s.entries))
}

// shrink returns m, or a new map of what it holds if that is little. A Go
// map keeps the room of the most it ever held, and at a cold start or a
// mass failover the loop's per-IP maps held thousands of IPs for a while
// (free, waiting, dirty, their wake times, our writes): at 10,000 IPs 2.4
// MB of heap that the steady state kept, when clear emptied them.
func shrink[K comparable, V any](m map[K]V) map[K]V {
	if len(m) > shrinkBelow {
		return m
	}
	out := make(map[K]V, len(m))
	maps.Copy(out, m)
	return out
}

// shrinkBelow: a per-IP map holding no more is made again by shrink.
const shrinkBelow = 64

// wakeAt asks for a pass at t: a pass over the IP being decided when the
// time is that IP's, a full pass otherwise.
func (s *state) wakeAt(t time.Time) {
	if ip := s.deciding; ip.IsValid() {
		s.wakeIPAt(ip, t)
		return
	}
	if s.wake.IsZero() || t.Before(s.wake) {
		s.wake = t
	}
}

// wakeIPAt asks for a pass over ip at t.
func (s *state) wakeIPAt(ip netip.Addr, t time.Time) {
	if cur, ok := s.ipWake[ip]; !ok || t.Before(cur) {
		s.ipWake[ip] = t
	}
	if s.ipWakeMin.IsZero() || t.Before(s.ipWakeMin) {
		s.ipWakeMin = t
	}
}

// observe feeds heartbeats to the liveness tracker and returns the locks
// by name.
func (s *state) observe(all []*coordinationv1.Lease, now time.Time) map[string]*coordinationv1.Lease {
	locks := make(map[string]*coordinationv1.Lease, len(all))
	seen := map[string]bool{}
	for _, l := range all {
		switch l.Labels[lease.RoleLabel] {
		case lease.RoleHeartbeat:
			hb, err := lease.ParseHeartbeat(l)
			if err != nil {
				continue
			}
			s.live.Observe(hb, now)
			seen[hb.Node] = true
		case lease.RoleLock:
			locks[l.Name] = l
		}
	}
	for _, n := range s.live.Nodes() {
		if !seen[n] {
			s.live.Gone(n, now)
		}
	}
	return locks
}

// heartbeatEvent answers a renewal of a heartbeat that the watch
// delivered, and reports whether a pass is needed: a full one when
// heartbeatsRenewed says so, one over the IPs that depend on it when
// whether this node may write changed (its own renewal came back).
func (s *state) heartbeatEvent() bool {
	s.needFull = s.heartbeatsRenewed() || s.needFull
	return s.needFull || s.writable(s.a.clk.Now()) != s.passWritable
}

// heartbeatsRenewed observes the heartbeats after a renewal of one and
// reports whether a full pass is needed: only when what every IP's
// decision reads (a node's liveness, status or duration, or the set of
// nodes) differs from what the last full pass read. Peers renew several
// times a second, and a pass over every IP for each renewal that changed
// none of that was most of eipd's CPU at 5,000 IPs. What changes with
// time alone needs no event: the timer wakes the loop at the next expiry
// (nextWake).
func (s *state) heartbeatsRenewed() bool {
	now := s.a.clk.Now()
	known, seen := len(s.live.Nodes()), 0
	for _, l := range s.a.heartbeats() {
		hb, err := lease.ParseHeartbeat(l)
		if err != nil {
			continue
		}
		if !s.live.Known(hb.Node) {
			return true
		}
		s.live.Observe(hb, now)
		seen++
	}
	return seen != known || !maps.Equal(s.passVerdicts, s.verdicts(now))
}

// verdict is what a reconcile pass reads about a node from its heartbeat.
type verdict struct {
	alive, renewing bool
	status          lease.Heartbeat // Version, RenewTime and Held cleared: they change with every renewal
}

func (s *state) verdicts(now time.Time) map[string]verdict {
	out := map[string]verdict{}
	for _, n := range s.live.Nodes() {
		hb, _ := s.live.Heartbeat(n)
		// Held is read by kubectl eip status, never by a pass, and during
		// a cold start or a mass failover it changes with every renewal
		// of every node: it made each a pass over every IP. Duration is
		// read by the liveness tracker alone, and what it judges with it
		// is alive and renewing: when a node died, each survivor left
		// slow heartbeats and both its renewal and its peer's asked every
		// survivor for a pass over every IP as the takeovers began.
		hb.Version, hb.RenewTime, hb.Held, hb.Duration = "", time.Time{}, 0, 0
		out[n] = verdict{alive: s.live.Alive(n, now), renewing: s.live.Renewing(n, now), status: hb}
	}
	return out
}

// effective is the lock as this node should see it: the cache, or our own
// write when the cache has not caught up with it yet.
func (s *state) effective(name string, cached *coordinationv1.Lease) *coordinationv1.Lease {
	if rv, ok := s.deleted[name]; ok {
		if cached != nil && cached.ResourceVersion == rv {
			return nil
		}
		delete(s.deleted, name)
	}
	w, ok := s.written[name]
	if !ok {
		return cached
	}
	if cached == nil {
		// Our write created it, and the cache shows it once the watch
		// delivered it; if the cache held Lease writes as new before it
		// was read and not this one, someone deleted it since. Given up a
		// lease duration after the write, a lock that fifty nodes' loaded
		// API server delivered 3.7 s late was taken for none: its holder
		// unbound the IP ("bound without a lock") or created it again.
		// Judged by the progress read after the cache, a lock delivered
		// in between was taken for one deleted.
		if s.seen == "" || lease.Newer(w.ResourceVersion, s.seen) {
			return w
		}
	} else if lease.Newer(w.ResourceVersion, cached.ResourceVersion) {
		return w
	}
	delete(s.written, name)
	return cached
}

// warnBadLock logs, once per version, a lock damaged by hand and what this
// node does about it.
func (s *state) warnBadLock(l *coordinationv1.Lease, err error, effect string) {
	if s.badLocks[l.Name] == l.ResourceVersion {
		return
	}
	s.badLocks[l.Name] = l.ResourceVersion
	s.log.Warn("damaged lock: "+effect, "lease", l.Name, "err", err)
}

// lockOf reads l for ip into lk and returns lk, or nil without a lock. A
// lock damaged by hand (garbage annotations) is still a lock: its holder
// is honoured and its next write repairs it.
func (s *state) lockOf(ip netip.Addr, l *coordinationv1.Lease, lk *lease.Lock) *lease.Lock {
	if l == nil {
		return nil
	}
	var err error
	*lk, err = lease.ParseLock(l)
	if err != nil {
		s.warnBadLock(l, err, "its holder is honoured until its next owner writes it whole")
		*lk = lease.Lock{Name: l.Name, IP: ip, ResourceVersion: l.ResourceVersion}
		if h := l.Spec.HolderIdentity; h != nil {
			lk.Holder = *h
		}
		lk.MoveTo = l.Annotations[lease.AnnotationMoveTo]
	}
	return lk
}

func (s *state) decide(v lease.View, ip netip.Addr, name string, l *coordinationv1.Lease, named bool, planned string) {
	s.deciding = ip
	defer func() { s.deciding = netip.Addr{} }()
	s.waiting.remove(ip)
	delete(s.ipWake, ip)
	lk := s.lockOf(ip, l, &s.read)
	if lk == nil || lk.Holder == "" || !s.live.Known(lk.Holder) {
		if _, ok := s.freeSince[ip]; !ok {
			s.freeSince[ip] = v.Now
		}
	} else {
		delete(s.freeSince, ip)
	}
	if s.inflight[name] {
		return
	}
	if lk == nil || lk.Holder != v.Self {
		s.conflicts.forget(ip)
	}
	_, bound := s.bound[ip]
	in := lease.IP{Addr: ip, Lock: lk, Named: named, Bound: bound, FreeSince: s.freeSince[ip], Planned: planned}
	d := lease.Decide(v, in)
	other := v
	other.Writable = !v.Writable
	if o := lease.Decide(other, in); o.Action != d.Action || o.Target != d.Target || !o.At.Equal(d.At) {
		s.writableDeps[ip] = true
	} else {
		delete(s.writableDeps, ip)
	}
	if named && bound && lk != nil && lk.Holder == v.Self {
		s.rebindIfMoved(ip)
	}
	if d.Action == lease.Create || d.Action == lease.Acquire {
		var holder string
		if lk != nil {
			holder = lk.Holder
		}
		// Decided again when one in flight completes, those the policy
		// gives this node or that it ranks first for before the others;
		// one whose rank's turn came waits too while any of those does,
		// or it would take the writer they wait for, racing another
		// node for its share (a Lease conflict).
		if first := goesFirst(v, ip, holder, planned); s.acquisitionsFull(v.Now) || !first && s.waiting.firstWaiting() > 0 {
			s.waiting.add(ip, first)
			return
		}
	}
	s.apply(v, ip, name, l, lk, d)
	if !named {
		delete(s.freeSince, ip)
	}
}

// goesFirst: an acquisition of ip, held by holder ("" if free), is one
// this node makes before the others while its writers are all busy: the
// policy gives it the IP, or nobody live holds it and this node ranks
// first among the live ones. A dead holder's IPs count as free: in a mass
// failover each survivor first takes those it ranks first for, and races
// for the others' only when its own are under way, rather than spending
// its writers on Lease conflicts.
func goesFirst(v lease.View, ip netip.Addr, holder, planned string) bool {
	free := holder == "" || !v.Alive(holder)
	return planned == v.Self || free && lease.Rank(ip, v.Self, v.Live) == 0
}

// lockWriteTimeout is how long a lock write may take: twice the lease
// duration, at least 4 s. A write that times out at its writer may still
// be carried out, and is taken for congestion (the window halves). When a
// node of fifty died, their API server answered the takeovers in up to
// 2.4 s, and with the lease duration (2 s) as the timeout half of them
// timed out, 23 after the API server had taken them: their nodes' windows
// fell to one at a time, with pauses, and each sent the write again on
// the lock it had read, a certain conflict.
func (s *state) lockWriteTimeout() time.Duration {
	return max(2*s.cfg.LeaseDuration, 4*time.Second)
}

func (s *state) apply(v lease.View, ip netip.Addr, name string, l *coordinationv1.Lease, lk *lease.Lock, d lease.Decision) {
	if !d.At.IsZero() {
		s.wakeAt(d.At)
	}
	e := s.entries[ip]
	w := write{ip: ip, name: name, action: d.Action, timeout: s.lockWriteTimeout()}
	now := s.a.clk.Now()
	switch d.Action {
	case lease.None:
		return
	case lease.Bind:
		s.bind(ip, e, d.Reason)
		return
	case lease.Unbind:
		s.unbind(ip, d.Reason)
		return
	case lease.Create:
		w.target = v.Self
		w.lease = lease.NewLockLease(s.a.opt.Namespace, ip, v.Self, e.Services, now)
		s.probeEarly(ip, e)
	case lease.Acquire:
		w.target = v.Self
		s.probeEarly(ip, e)
		if lk.Holder != "" {
			w.dead, _ = v.DeadSince(lk.Holder)
			w.from = lk.Holder
		}
		w.lease = lease.WithHolder(l, ip, v.Self, e.Services, now)
	case lease.Handoff, lease.Release:
		if _, bound := s.bound[ip]; d.Action == lease.Handoff && !bound {
			// The target binds a handed-off IP without probing, as its
			// holder removed the address first. One this node never bound
			// (in use on the LAN, or still being probed) is released
			// instead, naming the target as a move: it takes the lock at
			// once, as an acquisition, and probes.
			w.action = lease.Release
			w.lease = lease.WithMoveTo(lease.WithHolder(l, ip, "", e.Services, now), d.Target)
			s.log.Info("releasing an IP not bound here for its new holder to probe", "ip", ip, "node", d.Target, "reason", d.Reason)
			break
		}
		if d.Action == lease.Handoff {
			w.target = d.Target
		}
		if !s.drop(&w, d.Reason) {
			return
		}
		w.lease = lease.WithHolder(l, ip, w.target, e.Services, now)
	case lease.Delete:
		if !s.drop(&w, d.Reason) {
			return
		}
		w.rv = l.ResourceVersion
	case lease.ClearMove:
		w.lease = lease.WithMoveTo(l, "")
	}
	s.log.Debug("lock write", "ip", ip, "lease", w.name, "action", d.Action, "target", w.target, "reason", d.Reason)
	s.dispatch(w)
}

// dispatch hands a write to the writers. At most as many acquisitions as
// there are writers are in flight: the rest are decided again, on fresher
// information, when one completes, rather than queued on a view that may
// be seconds old by the time a writer gets to them (a thousand free IPs
// at a cold start, each also raced by the next-ranked node).
func (s *state) dispatch(w write) {
	acquisition := w.action == lease.Create || w.action == lease.Acquire
	now := s.a.clk.Now()
	if acquisition && s.acquisitionsFull(now) {
		return
	}
	w.round = s.sent
	select {
	case s.jobs <- w:
		s.inflight[w.name] = true
		if acquisition {
			s.window = s.windowAt(now)
			s.acquiring++
			s.sent++
		}
		if w.drops {
			s.dropping++
		}
		switch w.action {
		case lease.Create, lease.Acquire, lease.Handoff, lease.Release:
			s.pending[w.name] = w.target
		}
	default:
		// The queue is full; the next pass tries again.
		s.wakeAt(now.Add(s.cfg.RankStep()))
	}
}

// acquisitionsFull: no acquisition may be sent now (congestion).
func (s *state) acquisitionsFull(now time.Time) bool {
	w := s.windowAt(now)
	if w < 1 {
		return s.acquiring > 0 || now.Before(s.paceUntil)
	}
	return s.acquiring >= min(int(w), s.a.opt.Writers)
}

// slowStart is the window of acquisitions in flight at first and after a
// quiet spell (windowAt), and minWindow the narrowest it gets (congestion).
const (
	slowStart = 4
	minWindow = 0.25
)

// windowAt is the window of acquisitions in flight at now: slowStart
// after a quiet spell, a lock write's timeout with none in flight and no
// pause. What the API server answered before says little of what it
// answers now: fifty nodes given 1,000 IPs at once, each sending 32
// creates, had the API server refuse 891 requests unread (429) and let 117
// creates time out in the first ten seconds, against 11 taken; and a node
// whose writes timed out in a cold start, left at a quarter, sent a dead
// peer's IPs one at a time minutes later.
func (s *state) windowAt(now time.Time) float64 {
	if s.acquiring == 0 && !now.Before(s.paceUntil) && now.Sub(later(s.idleSince, s.paceUntil)) >= s.lockWriteTimeout() {
		return slowStart
	}
	return s.window
}

// congestion adapts the window of acquisitions in flight to what the API
// server answers, as TCP adapts its window to the network: halved by an
// acquisition that failed without an answer (a timeout, an overloaded or
// unreachable server), once for those sent before it was last halved, and
// widened by each answered one, lost races included: doubled below one,
// one wider above, up to the writers. Halved for each of the writes a
// stalled API server let time out together, a window of 32 would be at a
// quarter at once. When a
// node of fifty died holding 466 IPs, the survivors kept up to 32
// acquisitions each in flight (1,568 in all) against an API server that
// answered none of them within their timeout, and sent each again as it
// failed: 12,900 failed writes in three minutes, and hundreds of IPs not
// answering after a minute.
//
// Below one, a node sends one acquisition at a time and, after one that
// timed out, waits so that it has one in flight for a window's share of
// the time: a write's timeout (1/window - 1) times. Fifty nodes with one
// each in flight were more than their API server answered within the
// timeout on the 2-core test bed (15 to 20 creates a second): in a cold
// start 2,409 of 3,195 lock creates timed out, each sent again at once,
// and 1,000 IPs took 190 s.
func (s *state) congestion(r writeResult, now time.Time) {
	writers := float64(s.a.opt.Writers)
	if r.err != nil && !rewritten(r.err) {
		if r.round < s.cut {
			return
		}
		s.cut = s.sent
		s.window = max(minWindow, min(s.window, writers)/2)
		if s.window < 1 {
			s.paceUntil = now.Add(time.Duration(float64(s.lockWriteTimeout()) * (1/s.window - 1)))
		}
		return
	}
	s.window = min(writers, s.window+min(s.window, 1))
	s.paceUntil = time.Time{}
}

// drop unbinds w's IP, if bound, before w is dispatched, and reports
// whether w may go. While as many writes whose IP was unbound first are in
// flight as there are writers, a bound IP waits, bound, and is decided
// again when one of them comes back: at most a writer's worth of IPs are
// dark at a time, and the rest stay bound if the node is heard again
// before their turn (design-notes.md, "Dropping a writer's worth at a
// time"). A stop keeps to the same bound (shutdown).
func (s *state) drop(w *write, why string) bool {
	if _, bound := s.bound[w.ip]; !bound {
		return true
	}
	if s.dropping >= s.a.opt.Writers {
		s.dropWaiting[w.ip] = true
		return false
	}
	delete(s.dropWaiting, w.ip)
	s.unbind(w.ip, why)
	w.drops = true
	return true
}

func (s *state) writeDone(r writeResult) {
	if r.ip.IsValid() {
		s.dirty[r.ip] = true
	}
	delete(s.inflight, r.name)
	if r.action == lease.Create || r.action == lease.Acquire {
		s.acquiring--
		if s.acquiring == 0 {
			s.idleSince = s.a.clk.Now()
		}
		s.congestion(r, s.a.clk.Now())
	}
	if r.drops {
		s.dropping--
		for ip := range s.dropWaiting {
			s.dirty[ip] = true
		}
		clear(s.dropWaiting)
	}
	delete(s.pending, r.name)
	log := s.log.With("ip", r.ip, "lease", r.name)
	if r.err != nil {
		if rewritten(r.err) {
			s.a.opt.Metrics.Conflict()
			log.Debug("lock write lost a race", "action", r.action, "err", r.err)
			return
		}
		s.a.opt.Metrics.APIError(r.action.String())
		log.Warn("lock write failed", "action", r.action, "err", r.err)
		return
	}
	now := s.a.clk.Now()
	if r.action == lease.Delete {
		s.deleted[r.name] = r.rv
		delete(s.written, r.name)
		log.Info("deleted lock")
		return
	}
	s.written[r.name] = r.out
	switch r.action {
	case lease.Create, lease.Acquire:
		takeover := !r.dead.IsZero()
		s.a.opt.Metrics.Acquired(takeover)
		if takeover {
			s.a.opt.Metrics.Failover(now.Sub(r.dead))
			log.Info("took over from a dead holder", "after", now.Sub(r.dead))
			s.event(r.ip, corev1.EventTypeNormal, "TakenOver", fmt.Sprintf("%s taken over by %s from %s, judged dead", r.ip, s.a.opt.Node, r.from))
		} else {
			log.Info("acquired")
		}
		s.conflicts.fresh[r.ip] = true
	case lease.Handoff:
		s.a.opt.Metrics.Handoff()
		log.Info("handed off", "to", r.target)
		s.event(r.ip, corev1.EventTypeNormal, "Moved", fmt.Sprintf("%s handed from %s to %s", r.ip, s.a.opt.Node, r.target))
	case lease.Release:
		log.Info("released")
	}
}

// plan asks the policy where IPs should be.
func (s *state) plan(v lease.View, locks map[string]*coordinationv1.Lease) map[netip.Addr]string {
	holders := map[netip.Addr]string{}
	for _, m := range s.order {
		if s.cfg.Policy != config.PolicySpread && len(s.preferred[m.ip]) == 0 {
			// The sticky plan moves only IPs with a preferred node.
			continue
		}
		s.deciding = m.ip
		holders[m.ip] = s.plannedHolder(v, m.name, s.effective(m.name, locks[m.name]))
	}
	s.deciding = netip.Addr{}
	return policy.Plan(policy.Input{Policy: s.cfg.Policy, Live: v.Live, Holders: holders, Preferred: s.preferred})
}

// plannedHolder is the holder the policy plans from: the lock's, or the
// one an ownership write in flight names (planning again from the old
// holder would hand off other IPs for a move already under way); "" when
// not live.
func (s *state) plannedHolder(v lease.View, name string, l *coordinationv1.Lease) string {
	h, moving := s.pending[name]
	if !moving && l != nil && l.Spec.HolderIdentity != nil {
		h = *l.Spec.HolderIdentity
	}
	if !slices.Contains(v.Live, h) {
		return ""
	}
	return h
}

// planOne is plan for one IP. Only the sticky plan of an IP depends on
// that IP alone; under spread every pass is a full one (fullDue).
func (s *state) planOne(v lease.View, ip netip.Addr, name string, l *coordinationv1.Lease) string {
	in := policy.Input{Policy: s.cfg.Policy, Live: v.Live,
		Holders: map[netip.Addr]string{ip: s.plannedHolder(v, name, l)}, Preferred: map[netip.Addr][]string{ip: s.preferred[ip]}}
	return policy.Plan(in)[ip]
}

func (s *state) view(now time.Time) lease.View {
	var live []string
	for _, n := range s.live.Nodes() {
		// Live takes only nodes seen renewing: it is whom IPs are given
		// to. A node merely not judged dead (a quiet stream, a break)
		// keeps its IPs through View.Alive.
		if s.live.Renewing(n, now) && s.eligible(n) {
			live = append(live, n)
		}
	}
	slices.Sort(live)
	return lease.View{
		Self:       s.a.opt.Node,
		Now:        now,
		Writable:   s.writable(now),
		Eligible:   s.selfEligible && !s.shutting,
		Live:       live,
		Alive:      func(n string) bool { return s.live.Alive(n, now) },
		DeadSince:  func(n string) (time.Time, bool) { return s.live.DeadSince(n, now) },
		Step:       s.cfg.RankStep(),
		LateStep:   s.lockWriteTimeout(),
		PeersKnown: s.peersKnownAt,
	}
}

// eligible: may node hold IPs, as far as this node can tell?
func (s *state) eligible(node string) bool {
	if node == s.a.opt.Node {
		return s.selfEligible && !s.shutting
	}
	hb, ok := s.live.Heartbeat(node)
	if !ok || !hb.Eligible {
		return false
	}
	n, _ := s.a.nodes.Get(node)
	ok, _ = policy.NodeEligible(n, s.cfg.NodeSelector)
	return ok
}

// updateEligibility judges again whether this node may hold IPs and says so
// whenever the answer or its reason changes: in the log, and, when the
// configuration names an interface this node lacks (which only an operator
// can fix), in a Warning event on the ConfigMap.
func (s *state) updateEligibility() {
	ok, why, missingIface := s.eligibleSelf()
	if ok == s.selfEligible && why == s.selfReason {
		return
	}
	s.selfEligible, s.selfReason = ok, why
	if ok {
		s.log.Info("this node is eligible to hold IPs")
		return
	}
	s.log.Warn("this node is not eligible to hold IPs", "reason", why)
	if cm, err := s.a.configMap.Get(s.a.opt.ConfigMap); err == nil && missingIface {
		s.a.recorder.Event(cm, corev1.EventTypeWarning, "InterfaceMissing",
			fmt.Sprintf("node %s holds no IPs: %s", s.a.opt.Node, why))
	}
}

// eligibleSelf says whether this node may hold IPs, why not, and whether
// the reason is an interface of the configuration missing here.
func (s *state) eligibleSelf() (ok bool, why string, missingIface bool) {
	n, _ := s.a.nodes.Get(s.a.opt.Node)
	if ok, why := policy.NodeEligible(n, s.cfg.NodeSelector); !ok {
		return false, why, false
	}
	if !s.cfgLoaded {
		return false, "no valid configuration", false
	}
	if s.unheard {
		return false, fmt.Sprintf("peers do not hear this node's liveness datagrams (UDP port %d)", s.lanPort), false
	}
	if len(s.cfg.Ranges) == 0 {
		// Without ranges this node manages no IP: peers must not hand it any.
		return false, "no ranges are configured", false
	}
	for _, iface := range s.configuredIfaces() {
		if _, err := s.a.opt.Links.Up(iface); err != nil {
			return false, fmt.Sprintf("interface %q from the configuration: %v", iface, err), true
		}
	}
	return true, "", false
}

// configuredIfaces are the interface names the configuration names
// explicitly ("auto" resolves per IP).
func (s *state) configuredIfaces() []string {
	var out []string
	for _, r := range s.cfg.Ranges {
		if r.Iface != "auto" && r.Iface != "" && !slices.Contains(out, r.Iface) {
			out = append(out, r.Iface)
		}
	}
	return out
}

// collectHeartbeats deletes the heartbeats of nodes that are dead and whose
// Node object is gone. The first live eligible node does it.
func (s *state) collectHeartbeats(v lease.View, all []*coordinationv1.Lease) {
	if len(v.Live) == 0 || v.Live[0] != v.Self {
		return
	}
	for _, l := range all {
		node, ok := lease.NodeOf(l.Name)
		if !ok || l.Labels[lease.RoleLabel] != lease.RoleHeartbeat || v.Alive(node) || s.inflight[l.Name] {
			continue
		}
		if _, err := s.a.nodes.Get(node); !apierrors.IsNotFound(err) {
			continue
		}
		s.log.Info("deleting the heartbeat of a dead node that no longer exists", "node", node, "lease", l.Name)
		s.dispatch(write{name: l.Name, action: lease.Delete, rv: l.ResourceVersion, timeout: s.cfg.LeaseDuration})
	}
}

// event posts an Event on each Service of ip, within the node's budget
// (events.go); the rest are summarised.
func (s *state) event(ip netip.Addr, kind, reason, msg string) {
	e, ok := s.entries[ip]
	if !ok {
		return
	}
	for _, key := range e.Services {
		ns, name, _ := strings.Cut(key, "/")
		s.serviceEvent(ns, name, kind, reason, msg)
	}
}

// serviceEvent posts an Event on the Service ns/name, if the node's
// budget allows it; otherwise it is counted for the next summary.
func (s *state) serviceEvent(ns, name, kind, reason, msg string) {
	svc, err := s.a.services.Services(ns).Get(name)
	if err != nil {
		return
	}
	if !s.events.allow(s.a.clk.Now(), kind, reason) {
		s.a.opt.Metrics.EventSummarised(reason)
		return
	}
	s.a.recorder.Event(svc, kind, reason, msg)
}

// postSummary posts the summary of the Events the budget left out, when
// one is due, on this node's Node object, where `kubectl describe node`
// shows it.
func (s *state) postSummary(now time.Time) {
	kind, msg, ok := s.events.summary(now)
	if !ok {
		return
	}
	s.log.Info("Events on Services summarised", "summary", msg)
	if n, err := s.a.nodes.Get(s.a.opt.Node); err == nil {
		s.a.recorder.Event(n, kind, "EventsSummarised", msg)
	}
}

func (s *state) shutdown() error {
	s.shutting = true
	now := s.a.clk.Now()
	v := s.view(now)
	s.log.Info("shutting down: handing off what this node holds")
	s.seen = s.a.leasesSeen()
	all := s.a.allLeases()
	locks := s.observe(all, now)
	if v.Writable {
		// Peers must see this node leave before they see its handoffs
		// (the watch delivers Leases in the order they were written), or
		// a policy that still counts it live hands IPs back to it.
		if err := s.heartbeatNow(s.renewal()); err != nil {
			s.log.Warn("announce shutdown in the heartbeat", "err", err)
		}
	}
	// This node is out of v.Live now: the policy places its IPs as if
	// they were free (spread: in balance), and rank decides the rest.
	plan := s.plan(v, locks)
	var held []managed
	for _, m := range s.order {
		lk := s.lockOf(m.ip, s.effective(m.name, locks[m.name]), &s.read)
		if lk != nil && lk.Holder == v.Self && !s.inflight[m.name] && v.Writable {
			held = append(held, m)
		}
	}
	// Each IP is unbound just before its hand-off is sent, and no more are
	// in flight than there are writers: queued all at once, the last of
	// thousands would wait dark for the writes before them, and those
	// beyond the writers' queue would never be sent at all. A stop gives
	// up once no write came back for two lease durations; peers then take
	// what is left as from a dead node.
	idle := 2 * s.cfg.LeaseDuration
	quiet := s.a.clk.NewTimer(idle)
	defer quiet.Stop()
	for next := 0; next < len(held) || len(s.inflight) > 0; {
		for ; next < len(held) && s.dropping < s.a.opt.Writers; next++ {
			s.handOff(v, plan, held[next], locks)
		}
		select {
		case r := <-s.results:
			s.writeDone(r)
			quiet.Reset(idle)
		case <-quiet.C():
			s.log.Warn("gave up waiting for handoffs", "pending", len(s.inflight), "unsent", len(held)-next)
			s.inflight = map[string]bool{}
			next = len(held)
		}
	}
	for ip := range s.bound {
		s.unbind(ip, "shutting down")
	}
	for _, cancel := range s.claimWatch {
		cancel()
	}
	if err := s.heartbeatNow(renewal{remove: true, timeout: s.cfg.LeaseDuration}); err != nil {
		s.log.Warn("delete heartbeat", "err", err)
	}
	s.closeLAN()
	s.log.Info("stopped")
	return nil
}

// heartbeatNow asks the heartbeat writer for req (a renewal, or the
// deletion at shutdown), after any renewal it has in flight, and waits for
// the answer.
// handOff gives m, held by this node, to the node plan names, or to the
// best-ranked live peer; with none, it releases it.
func (s *state) handOff(v lease.View, plan map[netip.Addr]string, m managed, locks map[string]*coordinationv1.Lease) {
	l := s.effective(m.name, locks[m.name])
	lk := s.lockOf(m.ip, l, &s.read)
	t := plan[m.ip]
	if t == "" {
		t = v.BestPeer(m.ip)
	}
	d := lease.Decision{Action: lease.Release, Reason: "shutting down; no live eligible peer"}
	if t != "" {
		d = lease.Decision{Action: lease.Handoff, Target: t, Reason: "shutting down"}
	}
	s.apply(v, m.ip, m.name, l, lk, d)
}

func (s *state) heartbeatNow(req renewal) error {
	deadline := s.a.clk.After(2 * s.cfg.LeaseDuration)
	for sent := false; ; {
		var reqs chan renewal
		if !sent {
			reqs = s.renewReq
		}
		select {
		case reqs <- req:
			sent = true
		case r := <-s.renewRes:
			if r.renewal == req {
				return r.err
			}
		case <-deadline:
			return fmt.Errorf("heartbeat: no answer within %s", 2*s.cfg.LeaseDuration)
		}
	}
}
