package agent

import (
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/eip-project/eip/internal/config"
	"github.com/eip-project/eip/internal/lease"
	corev1 "k8s.io/api/core/v1"
)

// self is what this node knows of its own standing: whether it may write,
// bind and hold (its renewals, the barrier after a break, a stalled loop,
// fencing).
type self struct {
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
	fenced            bool
	// peersKnownAt: until then this node has not watched heartbeats for a
	// renew interval since it (re)connected, so it may not know every live
	// peer, nor its rank among them, and races for no IP.
	peersKnownAt time.Time
	// liveUntil is when this node last counted each node live
	// (lease.View.LiveUntil).
	liveUntil map[string]time.Time
	// unheard: a peer no longer hears this node over the LAN, since
	// unheardAt (lan.go).
	unheard   bool
	unheardAt time.Time

	log     *slog.Logger
	node    string
	metrics Metrics
}

// writable: this node may write locks. Its renewals succeed and its cache
// has caught up with its own latest heartbeat since the last break.
func (s *state) writable(now time.Time) bool {
	return s.desired.cfgLoaded && s.self.apiOK(now) && !s.self.needBarrier && s.live.SelfSeenSince(s.self.barrier) && s.live.Connected(now)
}

// writesAgain: this node may write (a pass read so), which ends a fence
// and a stall.
func (s *self) writesAgain() { s.fenced, s.stalled = false, false }

// sawLive records that node n was counted live at now
// (lease.View.LiveUntil).
func (s *self) sawLive(n string, now time.Time) { s.liveUntil[n] = now }

// judgedHeard records whether a peer no longer hears this node over the
// LAN (un), and when that may change next; while this node does not
// listen on the LAN (listening), it is heard. It says whether that
// changed.
func (s *self) judgedHeard(un bool, next time.Time, listening bool) (changed bool) {
	s.unheardAt = next
	if un == s.unheard || !listening {
		return false
	}
	s.unheard = un
	return true
}

// lanClosed: this node no longer listens on the LAN, and nobody reports
// it unheard there.
func (s *self) lanClosed() { s.unheard = false }

// fence: this node fenced; it binds nothing until it may write again.
func (s *self) fence() { s.fenced = true }

// reread: this node binds nothing new until a renewal sent now comes back
// through the watch (the barrier), with every lock change made before it.
func (s *self) reread() { s.needBarrier = true }

// apiOK: the last renewal succeeded, recently enough: within half of the
// duration it was renewed with (a slow heartbeat lasts its factor of lease
// durations). Judged against the fast pace alone, a node on slow
// heartbeats could write and bind only in the second after each renewal,
// and a takeover or a hand-off would wait for the next one. Judged against
// the pace of now, a node that just lost a peer (and so renews fast again)
// could not take over from it until its next renewal: the survivor that
// ticked first after the verdict took every IP, ranks notwithstanding.
func (s *self) apiOK(now time.Time) bool {
	return !s.renewFailing && !s.lastRenewOK.IsZero() && now.Sub(s.lastRenewOK) <= s.lastRenewFor/2
}

// mayBeJudgedDead reports whether a peer may have judged this node dead by
// now and taken its IPs over: peers report not hearing it over the LAN,
// or the last renewal the API server took was sent a whole lease duration
// ago (the duration it wrote). A peer times that duration from when its
// watch showed the renewal, which is after it was sent, so no peer judges
// this node dead by its heartbeat any sooner.
func (s *self) mayBeJudgedDead(now time.Time) bool {
	return s.unheard || s.lastRenewOK.IsZero() || now.Sub(s.lastRenewOK) >= s.lastRenewFor
}

// requestRenew offers the heartbeat writer the renewal r.
func (s *state) requestRenew(r renewal) {
	if s.hbLine.offer(r) {
		s.self.asked(r, s.clk.Now())
	}
}

// asked records the renewal r taken by the heartbeat writer at now.
func (s *self) asked(r renewal, now time.Time) { s.lastRenewAsked, s.lastAsked = now, r }

// idleRenewFactor: a node that may hold no IP and holds none renews its
// heartbeat this many times less often, with a duration as many times
// longer. Nobody takes over from it, so its liveness only feeds `kubectl
// eip status`; every renewal costs a write and one watch event for every
// node. In a rack of fifty nodes of which five may hold IPs, it takes
// eip's writes from 100/s to 19/s and the watch events from 5,000/s to
// 950/s (docs/benchmarks.md).
const idleRenewFactor = 10

// renewal is the heartbeat renewal this node's state asks for at now. Its
// factor is how many renew intervals it lasts: one, or more when nobody
// needs it renewed often: the node is idle, or its liveness goes over the
// LAN (lanState.slow).
func (s *state) renewal(now time.Time) renewal {
	conflicts, claims := s.conflicts.report(now)
	wireReport, wireChecked, checkDone := s.wire.status(now)
	r := renewal{
		status: lease.HeartbeatStatus{Eligible: s.elig.mayHold(), Error: s.elig.statusError(s.desired.cfgErr, s.routes.routerErr), Held: len(s.binder.bound), BGP: s.routes.bgpSessions,
			MACs: s.binder.ownMACs(), Conflicts: conflicts, Claims: claims, LivenessPort: s.lan.lanPort, Build: s.a.opt.Build,
			Wire: wireReport, WireChecked: wireChecked, CheckDone: checkDone},
		// Neither the duration nor the timeout may be shorter than what
		// peers need to see the renewal; a renewal slower than half a
		// lease is a failure as far as holding addresses goes.
		duration: s.desired.cfg.LeaseDuration,
		timeout:  max(s.desired.cfg.LeaseDuration/2, s.desired.cfg.RenewInterval),
		factor:   1,
	}
	switch {
	case s.lan.slow(s.live, s.self.unheard, now):
		r.factor = s.desired.cfg.SlowFactor(len(s.live.Nodes()))
	case !s.elig.mayHold() && len(s.binder.bound) == 0 && len(s.writes.inflight) == 0:
		// Idle: this node may hold no IP, holds none and writes none.
		r.factor = idleRenewFactor
	}
	r.duration *= time.Duration(r.factor)
	// A slow heartbeat lasts factor lease durations, and nobody judges
	// this node by it within one: its renewal may take half its own
	// period. Held to half a lease, renewals that a loaded API server
	// applied in a second and a half failed (150 a minute at fifty
	// nodes), were written again, and met a newer version.
	r.timeout = max(r.timeout, time.Duration(r.factor)*s.desired.cfg.RenewInterval/2)
	return r
}

// renewBackoff is how long after a failed renewal a node on slow heartbeats
// (factor > 1) writes it again: one renew interval after the first failure,
// then twice as long after each further one, up to maxRenewBackoff renew
// intervals. Its heartbeat lasts factor lease durations from the last
// renewal that succeeded, and its peers hear it over the LAN meanwhile;
// until one succeeds it binds nothing new; written again every renew
// interval, failing renewals would add to the load that made them fail.
// Renewed every renew interval (factor 1), a
// node's liveness rests on its heartbeat: it tries again at every tick.
func (s *self) renewBackoff(factor int, renew time.Duration) time.Duration {
	if factor == 1 || s.renewFails == 0 {
		return 0
	}
	wait := renew
	for range s.renewFails - 1 {
		wait = min(2*wait, maxRenewBackoff*renew)
	}
	return wait
}

// renewDue: the tick renews every renew interval (renew), a slow
// heartbeat every factor of them, and any node at once when what it says
// of itself changed (it became eligible, say) or when the duration it last
// wrote runs out before the next renewal at this pace could come; want is
// the renewal the node's state asks for now.
//
// Both are judged against the renewal last asked for, not the heartbeat in
// the cache, which shows a renewal only once the watch delivers it: on a
// loaded API server that takes longer than a tick, and each tick would
// write the same change again. And a duration that merely differs is no
// reason to write: the slow factor changes with the number of nodes, and
// rewriting every heartbeat whenever it did would cost a write per node
// for each node that joins beyond twenty.
func (s *self) renewDue(now time.Time, want renewal, renew time.Duration) bool {
	if s.renewFailing {
		return now.Sub(s.renewFailedAt) >= s.renewBackoff(want.factor, renew)-renew/2
	}
	if want.factor == 1 || s.lastRenewAsked.IsZero() {
		return true
	}
	period := time.Duration(want.factor) * renew
	if !sameStatus(want.status, s.lastAsked.status) || s.lastAsked.duration < period+want.timeout {
		return true
	}
	return now.Sub(s.lastRenewAsked) >= period-renew/2
}

// sameStatus: a and b say the same of the node but for the IPs it holds,
// which only `kubectl eip status` reads: it changes with every bind, and
// waits for the next renewal.
func sameStatus(a, b lease.HeartbeatStatus) bool {
	a.Held, b.Held = 0, 0
	a.WireChecked, b.WireChecked = time.Time{}, time.Time{}
	return a == b
}

// renewed takes the result of a renewal at now (renew is the renew
// interval) and counts it: a failure binds nothing new until a renewal
// sent after it comes back (the barrier); a success after a break or a
// stall sets that barrier, and this node knows its peers a renew interval
// later.
func (s *self) renewed(r renewResult, now time.Time, renew time.Duration) {
	if r.err != nil {
		s.metrics.APIError("renew")
	} else {
		s.metrics.Renewed(r.took)
	}
	if r.err != nil {
		if !s.renewFailing {
			s.log.Warn("heartbeat renewal failed; holding what is bound, binding nothing new", "err", r.err, "lease", lease.HeartbeatName(s.node))
		}
		s.renewFailing, s.needBarrier = true, true
		s.renewFails++
		s.renewFailedAt = now
		return
	}
	if s.renewFailing {
		s.log.Info("heartbeat renewed again; re-reading locks before binding anything new")
	}
	if s.needBarrier && !r.sent.Before(s.stallAt) {
		s.barrier = r.sent.Round(0).Truncate(time.Microsecond)
		s.needBarrier = false
		s.peersKnownAt = r.sent.Add(renew)
	}
	s.renewFailing, s.renewFails = false, 0
	s.lastRenewOK, s.lastRenewFor = r.sent, r.duration
}

// tick runs every renew interval: have the address lifetimes refreshed
// (see keeper), renew the heartbeat, and now and then resync.
func (s *state) tick() {
	now := s.clk.Now()
	s.self.ticked(now, s.desired.stallAfter())
	s.watch.progressed(now)
	s.wire.check(now, s.self.apiOK(now), s.live, &s.binder)
	s.reannounce(now) // starts the rounds, which then set their own wakes
	if !s.self.loopLate(now, s.desired.lateAfter()) {
		s.lifetime.loopTicked()
		s.sched.onTime()
	}
	s.events.summarise(now)
	s.serving.watch(s.clk.Now())
	s.routes.observe(s.clk.Now(), s.desired.cfg.BGP.ASN)
	s.lan.hear(s.live)
	s.checkUnheard(s.clk.Now())
	s.lan.tellPeers(s.live)
	s.lan.setTimings(&s.desired, s.live, s.self.unheard, s.clk.Now())
	// A stalled loop renews at once, slow heartbeat or not: it binds
	// nothing until a renewal sent since comes back.
	if r := s.renewal(now); s.self.renewDue(now, r, s.desired.cfg.RenewInterval) || s.self.stalled && s.self.needBarrier {
		s.requestRenew(r)
	}
	if now.Sub(s.sched.lastResync) >= s.a.opt.Resync {
		s.resync(false)
	}
}

// ticked records the loop's tick at now. One longer than stallAfter after
// the one before is a stall: peers may judge this node dead before they
// see the renewal this tick sends. It binds nothing until that renewal
// came back through the watch, with every lock change made before it
// (what is bound stays: a taker's probe waits for it to go).
func (s *self) ticked(now time.Time, stallAfter time.Duration) {
	if !s.lastTick.IsZero() && now.Sub(s.lastTick) > stallAfter {
		if !s.stalled {
			s.log.Warn("the loop stalled; re-reading the locks before binding or refreshing anything", "since", now.Sub(s.lastTick))
		}
		s.stalled, s.stallAt, s.needBarrier = true, now, true
	}
	s.lastTick = now
}

// fence, with api-loss=fence, unbinds everything once fence-after has
// passed since the last successful renewal was sent, and until then wakes
// the loop exactly when it will have: waiting for the next tick could fence
// up to a renew interval late, which is the whole default margin between
// fence-after and the moment a peer may judge this node dead.
func (s *state) fence(now time.Time) {
	if s.desired.cfg.APILoss != config.APILossFence || len(s.binder.bound) == 0 {
		return
	}
	d := lease.DecideFence(s.self.lastRenewOK, now, s.desired.cfg.FenceAfter, s.self.apiOK(now))
	if !d.At.IsZero() {
		s.sched.wakeFull(d.At)
	}
	if d.Action != lease.Unbind {
		return
	}
	s.log.Warn("fencing: no successful renewal within fence-after; unbinding everything", "fenceAfter", s.desired.cfg.FenceAfter)
	s.metrics.Fenced()
	for ip := range s.binder.bound {
		s.events.onIP(ip, corev1.EventTypeWarning, "Fenced", fmt.Sprintf("unbound %s from %s: API server unreachable (api-loss=fence)", ip, s.node))
		s.carryOut(ip, d)
	}
	s.self.fence()
}

func (s *state) view(now time.Time) lease.View {
	nodes := s.live.Nodes()
	if !slices.Contains(nodes, s.node) {
		nodes = append(nodes, s.node)
	}
	s.gone.observe(nodes, now)
	var live []string
	for _, n := range nodes {
		// Live takes only nodes seen renewing: it is whom IPs are given
		// to. A node merely not judged dead (a quiet stream, a break)
		// keeps its IPs through View.Alive.
		if s.live.Renewing(n, now) && s.elig.of(n, s.live, s.desired.cfg.NodeSelector) {
			live = append(live, n)
			s.self.sawLive(n, now)
		}
	}
	slices.Sort(live)
	return lease.View{
		Self:       s.node,
		Now:        now,
		Writable:   s.writable(now),
		Eligible:   s.elig.mayHold(),
		Live:       live,
		Alive:      func(n string) bool { return s.live.Alive(n, now) },
		DeadSince:  func(n string) (time.Time, bool) { return s.live.DeadSince(n, now) },
		Renewing:   func(n string) bool { return s.live.Renewing(n, now) },
		Step:       s.desired.cfg.RankStep(),
		LateStep:   s.desired.lockWriteTimeout(),
		PeersKnown: s.self.peersKnownAt,
		LiveUntil: func(n string) (time.Time, bool) {
			t, ok := s.self.liveUntil[n]
			return t, ok
		},
		SuccessorGrace: successorGrace * s.desired.cfg.LeaseDuration,
		SuccessorWait:  s.desired.cfg.LeaseDuration + s.a.opt.ProbeWait,
		WireRepair:     wireRepair,
		Gone:           s.gone.gone,
	}
}

// successorGrace, in lease durations, is how long a lock's successor may
// not be live before its holder names another (lease.View.SuccessorGrace):
// longer than a restart of eipd or of its node's kubelet, so that a
// rollout or a flapping node costs no write per IP.
const successorGrace = 10

// maxRenewBackoff bounds, in renew intervals, how long a node on slow
// heartbeats waits before it writes a failed renewal again.
const maxRenewBackoff = 4

// loopLate: the loop's last tick, which renews the heartbeat, is longer
// ago than lateAfter, or the loop stalled and has not re-read the locks
// since. A loop that runs late renews nothing meanwhile: its peers may
// judge it dead and take over IPs its cache still shows as its own. While
// it is late it binds nothing and puts no address back (lateBinds waits
// for its next tick). An API-server outage is not lateness: the loop
// ticks on time, and api-loss decides.
func (s *self) loopLate(now time.Time, lateAfter time.Duration) bool {
	return s.stalled || !s.lastTick.IsZero() && now.Sub(s.lastTick) > lateAfter
}
