package agent

import (
	"cmp"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"github.com/eip-project/eip/internal/lease"
	"github.com/eip-project/eip/internal/netif"
)

// maxProbeBackoff caps the wait between probes of an address found in use,
// so that eip binds it within a few seconds of its other user letting go.
const maxProbeBackoff = 4 * time.Second

// recheckEvery and recheckWait pace the probes after an eip node answered:
// one probe after each answer, recheckEvery later at first and then an
// eighth of the time the node has answered for, up to recheckMax; the
// address is free once recheckWait passes without an answer. A kernel
// answers a probe within a millisecond or two; strangers had the whole
// first probe wait to answer.
const (
	recheckEvery = 10 * time.Millisecond
	recheckMax   = time.Second
	recheckWait  = 20 * time.Millisecond
)

// recheckAfter is when to probe again after an eip node that has answered
// for the given time answered once more: a holder whose address goes away
// within a second costs a few probes, one that answers for minutes one a
// second.
func recheckAfter(answering time.Duration) time.Duration {
	return min(max(answering/8, recheckEvery), recheckMax)
}

// claimMemory is how long a stranger's claim for an address this node
// binds is shown in status after the last one seen: a machine using an
// address sends ARP requests from it whenever it talks to a host it has
// no neighbour entry for, so a claim that is not renewed for a minute
// most likely ended.
const claimMemory = time.Minute

// addrConflicts is what this node knows about who else answers for the
// addresses it holds or is acquiring.
//
// Before binding an IP that it acquired (a new lock, a free one, or one
// taken over from a holder judged dead), the node probes the LAN from the
// IP's interface: two probes (ARP probe, RFC 5227, or a DAD neighbour
// solicitation) half a probe wait apart, and it binds once a whole probe
// wait passed without an answer. The probe starts when the lock write is
// sent, so most of it overlaps the write. An IP handed over by a move is
// not probed: its previous holder removed it before naming this node.
//
//   - An answer from an eip node (a MAC one of them publishes in its
//     heartbeat) is a holder judged dead that still has the address: the
//     node probes again (recheckAfter), and binds once a probe goes
//     unanswered for recheckWait (and the first probe wait has passed),
//     never before. So two eip nodes never answer for one IP, whatever
//     the timing: an eipd killed or crashed loses its addresses with its
//     device at once (those on a LAN interface when their lifetime ends);
//     a live holder whose loop ran late, or that was cut off from the API
//     server, unbinds once it sees the lock name another node; a hung
//     loop's eipd exits (watchdog).
//   - An answer from any other MAC means the address is in use: it is not
//     bound, a Warning event AddressConflict names the MAC, the heartbeat
//     reports it (kubectl eip status shows the IP as conflict), and it is
//     probed again after 1 s, 2 s, then every 4 s. The node keeps the
//     lock meanwhile: releasing it would have every other node acquire,
//     probe and report the same conflict in turn.
type addrConflicts struct {
	fresh   map[netip.Addr]bool // acquired: probe before binding
	probing map[netip.Addr]probeRun
	inUse   map[netip.Addr]inUse
	// claimed: strangers claiming an address this node binds.
	claimed map[netip.Addr]claim

	// What it is handed: the announcer that probes and defends, how long
	// a probe waits (0: none), and where it reports.
	announcer Announcer
	probeWait time.Duration
	clk       clock.PassiveClock
	log       *slog.Logger
	metrics   Metrics
	events    *eventPoster
	node      string
}

type probeRun struct {
	iface string
	first time.Time // when probing started
	// started is when this run's first probe is (or was) due, last when
	// its latest went out; sent counts them.
	started, last time.Time
	sent          int
	// rechecking: an eip node answered; this run is one probe.
	rechecking bool
	// stranger is the MAC of a machine that is not an eip node that
	// answered; answeredBy the MAC of the eip node that did, peerSince
	// when one first did.
	stranger, answeredBy string
	peerSince            time.Time
	// lingering: the eip node's MAC answered past deadMACGrace, and it
	// was reported.
	lingering bool
}

// deadMACGrace is how long, beyond a lease duration, the MAC of an eip
// node judged dead may go on answering a takeover's probes before it is
// reported: its kernel drops the address with eipd's device at once, or
// within a lease duration on a LAN interface, and a hung eipd exits. An
// answer after that is no dying node: most likely a machine on the LAN
// answering with that MAC, which keeps the IP dark, and which eip cannot
// prevent.
const deadMACGrace = 3 * time.Second

type inUse struct {
	mac      string
	attempts int
	retry    time.Time
}

type claim struct {
	mac  string
	seen time.Time
	// defended is when this node last announced the address back.
	defended time.Time
}

// defendInterval is RFC 5227's DEFEND_INTERVAL: a holder defends an address
// a stranger claims once, and not again within it, so that two machines
// that both defend exchange one announcement each, not a ping-pong.
const defendInterval = 10 * time.Second

// newAddrConflicts is the conflicts of node, which probes through
// announcer for probeWait and reports to log, metrics and events.
func newAddrConflicts(node string, announcer Announcer, probeWait time.Duration, clk clock.PassiveClock, log *slog.Logger, metrics Metrics, events *eventPoster) addrConflicts {
	return addrConflicts{
		fresh: map[netip.Addr]bool{}, probing: map[netip.Addr]probeRun{}, inUse: map[netip.Addr]inUse{}, claimed: map[netip.Addr]claim{},
		announcer: announcer, probeWait: probeWait, clk: clk, log: log, metrics: metrics, events: events, node: node,
	}
}

// probeFirst: ip was acquired, and is probed before it is bound.
func (c *addrConflicts) probeFirst(ip netip.Addr) { c.fresh[ip] = true }

// probeHeldAtStart makes the first bind of each IP whose lock names this
// node, found so at start, wait for a probe: a successor may have bound
// it while this node was dead and not yet written the lock
// (docs/design.md, Succession). It binds at the first unanswered probe,
// and never while an eip node answers. locks are the cached locks by
// name, names the managed IPs by lock name, bound those bound here.
func (c *addrConflicts) probeHeldAtStart(locks map[string]*lease.Kept, names map[string]netip.Addr, bound map[netip.Addr]binding) {
	for name, l := range locks {
		ip, named := names[name]
		if !named || l.Holder != c.node || l.Successor == "" {
			continue
		}
		if _, ok := bound[ip]; !ok {
			c.probeFirst(ip)
		}
	}
}

// forget drops everything known about ip: it is no longer this node's.
func (c *addrConflicts) forget(ip netip.Addr) {
	delete(c.fresh, ip)
	delete(c.probing, ip)
	delete(c.inUse, ip)
	delete(c.claimed, ip)
}

// report is what the heartbeat says: the IPs held but not bound for a
// stranger answering, and the bound IPs a stranger claimed within
// claimMemory of now.
func (c *addrConflicts) report(now time.Time) (conflicts, claims string) {
	in := make(map[netip.Addr]string, len(c.inUse))
	for ip, u := range c.inUse {
		in[ip] = u.mac
	}
	cl := make(map[netip.Addr]string, len(c.claimed))
	for ip, k := range c.claimed {
		if now.Sub(k.seen) < claimMemory {
			cl[ip] = k.mac
		}
	}
	return lease.FormatAnswers(in), lease.FormatAnswers(cl)
}

// claimListener is what a probe or a check of the wire needs of the
// binder: the claims on its interface watched and its address read before
// the frame that may be answered goes out, and whether claims wait that
// the loop has not read (silence is no answer until none do).
type claimListener interface {
	watchClaimsOn(iface string)
	listenFor(ip netip.Addr)
	unheard() bool
}

// start probes ip on iface unless a probe is under way: called when a
// lock write that acquires ip is sent, so that the probe overlaps it.
func (c *addrConflicts) start(ip netip.Addr, iface string, l claimListener) {
	if c.probeWait <= 0 {
		return
	}
	if p, ok := c.probing[ip]; ok && p.iface == iface {
		return
	}
	if _, ok := c.inUse[ip]; ok {
		return // probed again when its backoff ends
	}
	c.step(ip, newProbeRun(iface, c.clk.Now()), l)
}

func newProbeRun(iface string, now time.Time) probeRun {
	return probeRun{iface: iface, first: now, started: now}
}

// wants is how many probes the run sends, and how far apart.
func (p probeRun) wants(wait time.Duration) (int, time.Duration) {
	if p.rechecking {
		return 1, 0
	}
	return 2, wait / 2
}

// done is when the run has waited long enough for answers.
func (p probeRun) done(wait time.Duration) time.Time {
	if p.rechecking {
		return later(p.first.Add(wait), p.last.Add(recheckWait))
	}
	// Each probe gets at least half a wait for its answer.
	return later(p.started.Add(wait), p.last.Add(wait/2))
}

// step sends the probe of run p that is due, if any, and records p.
func (c *addrConflicts) step(ip netip.Addr, p probeRun, l claimListener) probeRun {
	n, gap := p.wants(c.probeWait)
	now := c.clk.Now()
	if p.sent < n && !now.Before(p.started.Add(time.Duration(p.sent)*gap)) {
		l.watchClaimsOn(p.iface)
		l.listenFor(ip) // before an answer may come
		if err := c.announcer.Probe(p.iface, ip); err != nil {
			c.log.Warn("probe", "ip", ip, "iface", p.iface, "err", err)
		}
		p.sent++
		p.last = now
	}
	c.probing[ip] = p
	return p
}

// probed says whether ip may be bound on iface now: it needs no probe, or
// a probe wait passed without an answer. Otherwise it sends the probes
// that are due and says when the next step is.
func (c *addrConflicts) probed(ip netip.Addr, iface string, l claimListener) (ok bool, next time.Time) {
	wait := c.probeWait
	if wait <= 0 || !c.fresh[ip] {
		return true, time.Time{}
	}
	now := c.clk.Now()
	if u, ok := c.inUse[ip]; ok && now.Before(u.retry) {
		return false, u.retry
	}
	p, running := c.probing[ip]
	if !running || p.iface != iface {
		p = newProbeRun(iface, now)
	}
	if p.stranger != "" {
		return false, c.inUseBy(ip, p)
	}
	p = c.step(ip, p, l)
	if n, gap := p.wants(wait); p.sent < n {
		return false, p.started.Add(time.Duration(p.sent) * gap)
	}
	if done := p.done(wait); now.Before(done) {
		return false, done
	}
	// An answer received in time may not have been read yet.
	if l.unheard() {
		return false, now.Add(recheckWait)
	}
	c.foundFree(ip, iface)
	return true, time.Time{}
}

// foundFree: a probe wait passed without an answer, and ip is bound.
func (c *addrConflicts) foundFree(ip netip.Addr, iface string) {
	delete(c.probing, ip)
	delete(c.fresh, ip)
	if u, ok := c.inUse[ip]; ok {
		delete(c.inUse, ip)
		c.log.Info("address no longer in use on the LAN; binding it", "ip", ip, "iface", iface, "mac", u.mac)
		c.events.onIP(ip, corev1.EventTypeNormal, "AddressFree", fmt.Sprintf("%s is no longer answered by %s; %s binds it", ip, u.mac, c.node))
	}
}

// inUseBy records that a stranger answered probe run p for ip: not bound,
// reported, probed again after a backoff, at the time it returns.
func (c *addrConflicts) inUseBy(ip netip.Addr, p probeRun) time.Time {
	delete(c.probing, ip)
	prev := c.inUse[ip]
	u := inUse{mac: p.stranger, attempts: prev.attempts + 1}
	u.retry = c.clk.Now().Add(min(time.Second<<(u.attempts-1), maxProbeBackoff))
	c.inUse[ip] = u
	c.metrics.AddressConflict()
	if prev.mac != u.mac {
		c.log.Warn("address in use on the LAN by a machine that is not an eip node; not binding it", "ip", ip, "iface", p.iface, "mac", u.mac)
		c.events.onIP(ip, corev1.EventTypeWarning, "AddressConflict",
			fmt.Sprintf("%s is in use on the LAN by %s: %s does not bind it and probes again until it is free", ip, u.mac, c.node))
	}
	return u.retry
}

// lingering reports that mac, an eip node's, still answers for ip
// after it was judged dead and for longer than it could by dying.
func (c *addrConflicts) lingering(ip netip.Addr, iface, mac string, answering time.Duration) {
	c.metrics.AddressConflict()
	c.log.Warn("an eip node judged dead still answers for an address being taken over; not binding it", "ip", ip, "iface", iface, "mac", mac, "for", answering)
	c.events.onIP(ip, corev1.EventTypeWarning, "AddressConflict",
		fmt.Sprintf("%s is still answered by %s, the MAC of an eip node judged dead, after %s: %s does not bind it while that MAC answers (a machine on the LAN answering with it keeps the address dark)",
			ip, mac, answering.Round(time.Second), c.node))
}

// probeAnswer is what a claim comes to for a probe of its address.
type probeAnswer struct {
	// taken: the claim answers a probe under way on its interface; else
	// it is about an address this node may hold.
	taken bool
	// contest: another eip node probes for the address too; the lock
	// decides which of the two binds, not the wire.
	contest bool
	// recheck is when an eip node that still answers is probed again,
	// and the IP decided again.
	recheck time.Time
}

// answered takes a claim by mac (peer: an eip node's) for an address
// being probed; a peer judged dead a lease duration plus deadMACGrace ago
// that still answers is reported once.
func (c *addrConflicts) answered(cl netif.Claim, mac string, peer bool, leaseDuration time.Duration, now time.Time) probeAnswer {
	p, ok := c.probing[cl.IP]
	if !ok || p.iface != cl.Iface {
		return probeAnswer{}
	}
	if cl.Probe && peer {
		return probeAnswer{taken: true, contest: true}
	}
	var a probeAnswer
	if peer {
		// A holder judged dead whose kernel still has the address:
		// probe again once it may have let go.
		p.answeredBy = mac
		if p.peerSince.IsZero() {
			p.peerSince = now
			c.log.Info("an eip node still answers for an address being taken over; probing again", "ip", cl.IP, "iface", cl.Iface, "mac", mac)
		}
		p.rechecking, p.started, p.sent = true, now.Add(recheckAfter(now.Sub(p.peerSince))), 0
		if !p.lingering && now.Sub(p.peerSince) >= leaseDuration+deadMACGrace {
			p.lingering = true
			c.lingering(cl.IP, cl.Iface, mac, now.Sub(p.peerSince))
		}
		a.recheck = p.started
	} else {
		p.stranger = mac
	}
	c.probing[cl.IP] = p
	a.taken = true
	return a
}

// defend answers a stranger's claim for an address this node holds on
// iface while its renewals succeed. eipd keeps serving it and defends it
// once (RFC 5227 §2.4 (b)): one announcement, so that hosts the claim
// misled find the holder again, and no more within defendInterval, which
// a stranger that defends its address would answer in turn.
func (c *addrConflicts) defend(cl netif.Claim, mac, iface string, now time.Time) {
	c.metrics.ForeignClaim()
	prev, ok := c.claimed[cl.IP]
	if !ok || prev.mac != mac || now.Sub(prev.seen) >= claimMemory {
		c.log.Warn("a machine that is not an eip node claims an address this node holds", "ip", cl.IP, "iface", cl.Iface, "mac", mac)
		c.events.onIP(cl.IP, corev1.EventTypeWarning, "AddressClaimed",
			fmt.Sprintf("%s, bound on %s, is also claimed on the LAN by %s: %s defended it once; two machines answer for it until that one lets go", cl.IP, c.node, mac, c.node))
	}
	k := claim{mac: mac, seen: now, defended: prev.defended}
	if k.defended.IsZero() || now.Sub(k.defended) >= defendInterval {
		if err := c.announcer.Defend(iface, cl.IP); err != nil {
			c.log.Warn("defend", "ip", cl.IP, "iface", cl.Iface, "err", err)
		}
		k.defended = now
	}
	c.claimed[cl.IP] = k
}

// candidate probes ip, a new address for a Service, on iface, as before a
// bind (allocator.probedFree): it sends the probes due, and says who
// answered, or that nobody did within a probe wait, and when to look
// again (zero: at an answer).
func (c *addrConflicts) candidate(ip netip.Addr, iface string, l claimListener, now time.Time) (mac string, free bool, next time.Time) {
	p, ok := c.probing[ip]
	if !ok || p.iface != iface {
		c.start(ip, iface, l)
		return "", false, time.Time{}
	}
	if mac := cmp.Or(p.stranger, p.answeredBy); mac != "" {
		delete(c.probing, ip)
		return mac, false, now
	}
	p = c.step(ip, p, l)
	if n, gap := p.wants(c.probeWait); p.sent < n {
		return "", false, p.started.Add(time.Duration(p.sent) * gap)
	}
	if done := p.done(c.probeWait); now.Before(done) {
		return "", false, done
	}
	delete(c.probing, ip)
	return "", true, now
}

// probes says whether ip is probed, and before binding it is.
func (c *addrConflicts) probes(ip netip.Addr) bool {
	_, ok := c.probing[ip]
	return ok
}

// answering: something answers for ip on the LAN: a stranger (in use), or
// an eip node whose probe of ip was answered (a holder alive but late).
func (c *addrConflicts) answering(ip netip.Addr) bool {
	if _, inUse := c.inUse[ip]; inUse {
		return true
	}
	p, probing := c.probing[ip]
	return probing && !p.peerSince.IsZero()
}

// off: nothing is probed (Options.ProbeWait is 0).
func (c *addrConflicts) off() bool { return c.probeWait <= 0 }

// claimedSet is the addresses whose claims on the wire this node reads:
// those it probes or binds, and, until the next full pass, those it
// probed or bound since the one before. The claim watches' goroutines read
// it, so that the other nodes' frames for the addresses they acquire (at a
// cold start about 80,000 for each node at 10,000 IPs on 3 nodes) end
// there instead of each waking the loop. An address goes in before its
// probe is sent or it is bound, so no answer and no claim is missed that
// the loop would have heeded.
type claimedSet struct {
	mu  sync.Mutex
	ips map[netip.Addr]struct{}
}

func newClaimedSet() *claimedSet { return &claimedSet{ips: map[netip.Addr]struct{}{}} }

func (c *claimedSet) add(ip netip.Addr) {
	c.mu.Lock()
	c.ips[ip] = struct{}{}
	c.mu.Unlock()
}

func (c *claimedSet) has(ip netip.Addr) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.ips[ip]
	return ok
}

// keepOnly drops the addresses keep refuses.
func (c *claimedSet) keepOnly(keep func(netip.Addr) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	maps.DeleteFunc(c.ips, func(ip netip.Addr, _ struct{}) bool { return !keep(ip) })
}

// eipMAC says whether mac is one an eip node publishes in its heartbeat,
// as live has them (nil: none yet), or one of own, this node's.
func eipMAC(live *lease.Liveness, own func() string, mac string) bool {
	if live == nil {
		return false
	}
	for _, n := range live.Nodes() {
		if hb, ok := live.Heartbeat(n); ok && slices.Contains(lease.ParseMACs(hb.MACs), mac) {
			return true
		}
	}
	return slices.Contains(lease.ParseMACs(own()), mac)
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
