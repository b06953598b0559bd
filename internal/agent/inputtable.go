package agent

import (
	"context"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/eip-project/eip/internal/endpoints"
	"github.com/eip-project/eip/internal/ipset"
	"github.com/eip-project/eip/internal/lease"
	"github.com/eip-project/eip/internal/netif"
)

// The loop's inputs, in one table that both its wait (run) and its drain
// read: what each input is for is said once, in handle.
const (
	inDone  = iota // the context ended: shut down
	inTimer        // a time the schedule set came
	inTick
	inServices
	inNodes
	inLeases
	inHeartbeats
	inConfigMap
	inEndpoints
	inRenewed
	inWritten
	inAllocated
	inAddress
	inLink
	inClaim
	inDatagrams
	inProxied
	nInputs
)

// inputs is the table of the loop's input channels: all of them for the
// wait, and for the drain those from the tick on, then a default.
type inputs struct {
	cases, drain []reflect.SelectCase
}

func (s *state) newInputs(ctx context.Context, tick, timer <-chan time.Time) *inputs {
	in := &inputs{cases: make([]reflect.SelectCase, nInputs)}
	for i, ch := range map[int]any{
		inDone: ctx.Done(), inTimer: timer, inTick: tick,
		inServices: s.a.svcKick, inNodes: s.a.nodeKick, inLeases: s.a.leaseKick, inHeartbeats: s.a.hbKick, inConfigMap: s.a.cmKick,
		inEndpoints: s.a.epKick,
		inRenewed:   s.hbLine.res, inWritten: s.writes.results, inAllocated: s.alloc.results,
		inAddress: s.a.opt.AddrEvents, inLink: s.a.opt.LinkEvents, inClaim: s.binder.claims, inDatagrams: s.lan.speaker.kick,
		inProxied: s.serving.proxied,
	} {
		in.cases[i] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)}
	}
	in.drain = append(slices.Clone(in.cases[inTick:]), reflect.SelectCase{Dir: reflect.SelectDefault})
	return in
}

// setTick points the tick input at a new ticker's channel.
func (in *inputs) setTick(tick <-chan time.Time) {
	in.cases[inTick].Chan = reflect.ValueOf(tick)
	in.drain[0].Chan = in.cases[inTick].Chan
}

// wait blocks until an input comes, and returns it.
func (in *inputs) wait() (int, reflect.Value) {
	i, v, _ := reflect.Select(in.cases)
	return i, v
}

// waiting returns an input that is already there, if one is, without
// blocking; neither the end of the context nor the timer, which only the
// wait answers.
func (in *inputs) waiting() (int, reflect.Value, bool) {
	i, v, _ := reflect.Select(in.drain)
	if i == len(in.drain)-1 {
		return 0, reflect.Value{}, false
	}
	return i + inTick, v, true
}

// drainLimit bounds the inputs one reconcile pass answers, so that a flood
// cannot hold the pass (and the heartbeat it requests) back for long.
const drainLimit = 1024

// drainInto has handle answer the inputs that are already waiting, without
// blocking, so that one reconcile pass answers a burst of them: a thousand
// lock writes coming back at a cold start, a lease event per write, an
// address event per binding. A pass costs the same for one input as for a
// thousand.
func (in *inputs) drainInto(handle func(i int, v reflect.Value, draining bool) bool) {
	for range drainLimit {
		i, v, ok := in.waiting()
		if !ok {
			return
		}
		handle(i, v, true)
	}
}

// handle answers input i, received as v, and says whether it asks for a
// pass now. While draining, a pass follows in any case, and a heartbeat's
// renewal is only noted for it.
func (s *state) handle(i int, v reflect.Value, draining bool) (pass bool) {
	now := s.clk.Now
	switch i {
	case inTimer:
		s.wire.check(now(), s.self.apiOK(now()), s.live, &s.binder)
		s.reannounce(now())
		return s.checkUnheard(now()) || s.sched.passDue(s.moment(now()))
	case inTick:
		s.tick()
		return s.sched.passDue(s.moment(now()))
	case inServices, inNodes, inConfigMap, inEndpoints:
		s.sched.inputChanged(i)
	case inLeases:
	case inHeartbeats:
		s.wire.requested(now())
		if draining {
			s.sched.inputChanged(i)
			return true
		}
		return s.sched.heard(s.live, s.leases.heartbeats(), now(), s.writable)
	case inRenewed:
		s.self.renewed(v.Interface().(renewResult), now(), s.desired.cfg.RenewInterval)
		return s.sched.passDue(s.moment(now()))
	case inWritten:
		s.writeDone(v.Interface().(writeResult))
	case inAllocated:
		r := v.Interface().(allocResult)
		s.sched.askFull()
		s.book.created(r.created)
		s.alloc.done(r, &s.desired, now())
	case inAddress:
		// It restores what it can at once; what a late loop may not,
		// its next tick on time decides again (lateBinds).
		s.addrEvent(v.Interface().(netif.AddrEvent))
		return false
	case inLink:
		s.linkEvent(v.Interface().(netif.LinkEvent))
	case inClaim:
		return s.claim(v.Interface().(netif.Claim))
	case inDatagrams:
		heard := s.lan.hear(s.live)
		return s.checkUnheard(now()) || heard
	case inProxied:
		if !s.serving.verdict(v.Interface().(endpoints.Result)) {
			return false
		}
		s.sched.inputChanged(inEndpoints)
	}
	return true
}

// claim: another machine announced an address. While our renewals fail,
// peers may have judged us dead and taken the address: give it up at once.
// An eip node that probes for an address we hold may have taken its lock
// over, and binds it once we stop answering (addrConflicts), so its probe
// counts as its claim once a peer can have judged us dead
// (mayBeJudgedDead); before then it is a node whose cache has not shown
// our lock yet, probing while its create is refused. At fifty nodes on a
// loaded API server a renewal answered in more than half a lease made such
// probes unbind IPs their holders had just bound, dark for up to 42 s. A
// stranger's probe is answered by our kernel, and claims nothing. A claim
// for an address this node neither probes nor holds
// changes nothing, and says so: it asks for no pass. At a cold start every
// frame of the other nodes' probes and announcements is such a claim,
// about 80,000 for each node at 10,000 IPs on 3 nodes, and each used to
// run a pass and decide its IP again.
func (s *state) claim(c netif.Claim) (changed bool) {
	now := s.clk.Now()
	if c.Dropped > 0 {
		s.wire.lost(now)
		return false
	}
	mac := c.MAC.String()
	if !c.Probe {
		s.wire.answer(c.IP, mac, now)
	}
	b, bound := s.binder.bound[c.IP]
	if !s.conflicts.probes(c.IP) && !bound {
		return false
	}
	s.sched.markDirty(c.IP)
	peer := eipMAC(s.live, s.binder.ownMACs, mac)
	switch a := s.conflicts.answered(c, mac, peer, s.desired.cfg.LeaseDuration, now); {
	case a.contest:
		if s.succ.contest(c.IP) {
			s.log.Info("another eip node probes for an IP this node succeeds to; binding it only once the lock names this node", "ip", c.IP)
		}
		return true
	case a.taken:
		if !a.recheck.IsZero() {
			// Only this IP's decision waits for it: a full pass for
			// each, in a mass failover, held every takeover back.
			s.sched.wakeIP(c.IP, a.recheck)
		}
		return true
	case !bound:
		return true
	}
	apiOK := s.self.apiOK(now)
	if !peer && !c.Probe && apiOK {
		s.conflicts.defend(c, mac, b.iface, now)
		return true
	}
	// Whose MAC it is matters to a probe only while cut off.
	d := lease.DecideClaim(lease.Claim{MAC: mac, Probe: c.Probe, Peer: !apiOK && c.Probe && peer}, apiOK, s.self.mayBeJudgedDead(now))
	if d.Action == lease.Unbind {
		s.log.Warn("another node claimed an address we hold while the API is unreachable; unbinding", "ip", c.IP, "iface", c.Iface, "mac", mac, "probe", c.Probe)
	}
	s.carryOut(c.IP, d)
	return true
}

// checkUnheard: a peer that hears others no longer hears this node, and
// will judge it dead a lease duration after its last sign of it and take
// its IPs over. While unheard (from fence-after, ¾ of the lease duration
// by default, after that sign) the node is not eligible: it binds nothing
// and hands what it holds to the peers that are heard, each IP unbound
// just before its hand-off is written. It does not unbind everything at
// once: a peer that takes an IP over probes for it first and binds only
// once this node no longer answers (addrConflicts), so the IP keeps
// answering from here until then, never from two MACs; and a node that is
// merely late (starved of CPU, or the whole machine stalled) or cannot
// reach the API server would only leave its IPs dark. It reports whether
// that changed.
func (s *state) checkUnheard(now time.Time) bool {
	if t := s.lan.sentFirst(); !t.IsZero() {
		s.live.Sending(t)
	}
	un, next := s.live.Unheard(now, s.desired.cfg.FenceAfter)
	if !s.self.judgedHeard(un, next, s.lan.lanConn != nil) {
		return false
	}
	s.sched.wakeFull(now) // a pass now: eligibility changed
	if !un {
		s.log.Info("peers hear this node over the LAN again")
		return true
	}
	s.log.Warn("a peer no longer hears this node over the LAN and will judge it dead; handing its IPs to the peers it hears", "port", s.lan.lanPort)
	for ip := range s.binder.bound {
		s.events.onIP(ip, corev1.EventTypeWarning, "Unheard", fmt.Sprintf("%s hands %s to a peer: peers do not hear its liveness datagrams (UDP port %d)", s.node, ip, s.lan.lanPort))
	}
	return true
}

// configureLAN opens, moves or closes the liveness socket after the
// configuration changed (docs/design.md, Liveness over the LAN), and
// tells the liveness judge the LAN's timings.
func (s *state) configureLAN() {
	if s.lan.configure(s.desired.cfg) {
		s.self.lanClosed()
	}
	s.lan.setTimings(&s.desired, s.live, s.self.unheard, s.clk.Now())
}

// reannounce has the reannouncer send the held IPs due, while the gate
// (mayBind, on no interface in particular) lets this node bind: a node
// whose loop runs late, that fenced, or whose lock view may be stale
// could be announcing an IP a peer has taken over since.
func (s *state) reannounce(now time.Time) {
	s.reannouncer.announce(now, s.desired.cfg.AnnounceInterval, s.binder.bound, s.mayBind(netip.Addr{}, "", now, false).why == notRefused)
}

// writeDone takes a lock write's result: its IP, and those whose drop
// waited for it, are decided again; a lock written is the lock book's
// until the cache shows it, and an IP acquired is probed before it is
// bound.
func (s *state) writeDone(r writeResult) {
	now := s.clk.Now()
	if r.ip.IsValid() {
		s.sched.markDirty(r.ip)
	}
	s.sched.markDirty(s.writes.done(r, now, s.desired.lockWriteTimeout())...)
	s.writes.report(r, now)
	if r.err != nil {
		return
	}
	s.book.wrote(r)
	if _, bound := s.binder.bound[r.ip]; r.action.Acquires() && !bound {
		s.conflicts.probeFirst(r.ip)
	}
}

// computeEntries recomputes the managed IPs from the Services and the
// owners their locks record.
func (s *state) computeEntries() {
	svcs := s.a.allServices()
	entries, rejected := ipset.Compute(svcs, s.desired.cfg, s.desired.reserved, s.a.recordedOwner)
	s.desired.manage(entries)
	s.events.managed(s.desired.entries)
	s.book.keepFree(func(ip netip.Addr) bool {
		_, ok := s.desired.entries[ip]
		return ok
	})
	s.ports.apply(s.desired.cfg.PortFilter, entries, svcs)
	v := s.view(s.clk.Now())
	s.events.rejected(s.desired.newRejections(rejected), len(v.Live) == 0 || v.Live[0] == s.node)
}
