package agent

import (
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/eip-project/eip/internal/lanlive"
)

// speakQuietAfter is how long the owner loop may go without progress
// before this node stops sending liveness datagrams. The speaker runs
// beside the loop, so a loop starved of CPU does not make this node look
// silent; but a hung one must, as its heartbeat would, so that its peers
// judge it dead and take its locks over while the watchdog waits out
// loopHungAfter. Those takeovers cannot bind while this node's device
// still answers (the probe before a takeover waits for an eip node to
// stop), so a node that stops speaking earlier gives nothing up sooner;
// what it buys is time: peers judge it dead a lease duration after it
// fell silent and have the rest of loopHungAfter to write thousands of
// locks, so that they bind the moment the watchdog ends eipd. A third of
// loopHungAfter leaves them 20 s, more than the writes of a mass failover
// of 3,400 IPs took on the test bed (17.5 s); and it is many times the
// longest a loop went without progress at a tenth of a core.
const speakQuietAfter = loopHungAfter / 3

// maxHeard bounds the datagrams waiting for the loop: ten seconds of them
// at fifty nodes. Beyond, the oldest go; the loop, seeing a gap in what it
// heard, grants every node a fresh lease duration, as after a silence of
// the LAN.
const maxHeard = 1024

// relayAllowance is how much older a sign is taken to be for each report
// it passed through. A report gives the age of its sign when it was sent,
// and the receiver dates the sign from when it arrived: the time in
// between, on the wire and waiting for this goroutine, would make the sign
// younger at every hop. Signs go round in reports (A tells B, B tells C,
// C tells A), and a dead node's last sign kept getting younger, so that it
// was judged dead late: in a 50-node simulation with 5 ms on the wire,
// 3.4 s after it died at a 2 s lease duration. Taken this much older at
// every hop, a sign only ages as it goes round, as long as a hop takes
// less; a sign that reaches a node in two or three hops is 40 to 60 ms
// older than it was, against the half lease duration after which a peer
// is asked directly.
const relayAllowance = 20 * time.Millisecond

// answerEvery: a peer is answered at most answerEvery times a renew
// interval (see speaker.answer).
const answerEvery = 2

// heard is a peer's datagram as the speaker took it in.
type heard struct {
	node string
	ages map[string]time.Duration
	at   time.Time // when it arrived
}

// speaker sends this node's liveness datagrams and takes in its peers',
// on a goroutine of its own (docs/design.md, Liveness over the LAN). The
// owner loop used to do both, and a loop busy with a pass, or starved of
// CPU, sent late and timed what it heard by when it got round to it: its
// peers stopped hearing it, reported it unheard, and it handed its IPs
// around for nothing. The speaker records when each datagram arrives and
// what it said, and sends every renew interval the ages of its signs of
// life as they are at that moment. The loop reads what arrived, with its
// arrival times, when it gets to it, and keeps judging peers itself; it
// tells the speaker where to send and which nodes it knows on each tick.
type speaker struct {
	self  string
	clk   clock.WithTicker
	log   *slog.Logger
	watch *watchdog

	mu      sync.Mutex
	conn    LANConn // nil: liveness over the LAN is off
	timings lanTimings
	// peers are where each peer hears datagrams, names them sorted, and
	// fan chooses which of them each datagram goes to (lanfanout.go).
	peers map[string]lanlive.Peer
	names []string
	fan   *fanout
	known map[string]bool
	// joined are the nodes the loop does not know yet that sent a
	// datagram from an address of their Node, with when the last one
	// arrived and where it came from (where they hear): see record.
	joined     map[string]time.Time
	joinedFrom map[string]netip.AddrPort
	// answered is when each peer was last answered: see answer.
	answered map[string]time.Time
	// signs is the latest sign of life of each known node: when its
	// datagram arrived, or when a peer's datagram said it last had one.
	signs  map[string]time.Time
	queue  []heard
	silent bool
	// firstSent is when a datagram first left on conn (zero: none yet).
	firstSent time.Time
	// kick wakes the loop when the queue was empty and is not.
	kick chan struct{}
}

func newSpeaker(self string, clk clock.WithTicker, log *slog.Logger, watch *watchdog) *speaker {
	return &speaker{self: self, clk: clk, log: log, watch: watch, fan: newFanout(),
		signs: map[string]time.Time{}, known: map[string]bool{}, joined: map[string]time.Time{}, joinedFrom: map[string]netip.AddrPort{},
		answered: map[string]time.Time{}, kick: make(chan struct{}, 1)}
}

// configure gives the speaker the liveness socket (nil: off) and the
// timings: it sends every renew interval, reports signs younger than two
// lease durations, and asks a peer whose sign is suspect old. Turned off,
// it forgets what it heard.
func (p *speaker) configure(conn LANConn, t lanTimings) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if conn != p.conn {
		p.firstSent = time.Time{}
	}
	p.conn, p.timings = conn, t
	if conn == nil {
		clear(p.signs)
		clear(p.joined)
		clear(p.joinedFrom)
		clear(p.answered)
		p.queue = nil
	}
}

// setPeers tells the speaker its peers and where each hears datagrams,
// and which nodes the loop knows (whose heartbeats it observed): only
// their datagrams and signs count, as in lease.Liveness.
func (p *speaker) setPeers(peers map[string]lanlive.Peer, known []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.peers, p.names = peers, slices.Sorted(maps.Keys(peers))
	p.fan.setPeers(p.names, p.clk.Now())
	clear(p.known)
	for _, n := range known {
		p.known[n] = true
		delete(p.joined, n)
		delete(p.joinedFrom, n)
	}
	for n := range p.answered {
		if !p.known[n] {
			delete(p.answered, n)
		}
	}
}

// counts reports whether node's signs count at now: the loop knows it, or
// it joined (see record) within two lease durations. Called with mu held.
func (p *speaker) counts(node string, now time.Time) bool {
	if p.known[node] {
		return true
	}
	at, ok := p.joined[node]
	if ok && now.Sub(at) >= 2*p.timings.duration {
		delete(p.joined, node)
		delete(p.joinedFrom, node)
		return false
	}
	return ok
}

// receive takes in a datagram as it arrives. The socket delivers only
// those from an address of the Node they name (lanlive.Session.Admit,
// with nodeAddrs.sentBy): another machine on the LAN cannot speak for a node
// (it could still keep a dead node alive by forging its source;
// liveness-port can be closed to the LAN's other hosts, see
// docs/operating.md). A datagram that shows either side's sign of the
// other suspect old is answered at once (answerNow).
func (p *speaker) receive(rx lanlive.Received) {
	now := p.clk.Now()
	if to, ok := p.record(rx, now); ok {
		p.send(now, to)
	}
}

// record takes rx in and returns the peer to answer, if any. A sender the
// loop does not know yet (its heartbeat has not come through this node's
// watch) counts all the same when its source is an address of its Node:
// at a cold start of fifty nodes the watches lag each other by seconds,
// and a joining node that its peers did not hear for fence-after judged
// itself unheard and handed its IPs around. Its sign goes into this node's
// reports, so that the peers who know it hear of it; the loop judges it
// once its heartbeat comes.
//
// Only what a datagram says of nodes that count is kept: a peer's report
// names at most the nodes of the cluster. A hello (lanlive.Hello) counts
// for nothing and is answered, so that its sender learns this process's
// boot; a datagram of the format before counts only from a peer whose
// heartbeat says it speaks nothing newer.
func (p *speaker) record(rx lanlive.Received, now time.Time) (answer string, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	from := rx.Msg.From
	if p.conn == nil || from == p.self {
		return "", false
	}
	if rx.Kind == lanlive.Legacy && !p.peers[from].Legacy {
		return "", false
	}
	if !p.known[from] {
		p.joinedFrom[from] = netip.AddrPortFrom(rx.Source, rx.Port)
	}
	if rx.Kind == lanlive.Hello {
		return from, p.answer(from, true, now)
	}
	if !p.known[from] {
		p.joined[from] = now
	}
	before := p.signs[from]
	p.sign(from, now)
	ages := make(map[string]time.Duration, min(len(rx.Msg.Ages), len(p.known)+len(p.joined)+1))
	for n, age := range rx.Msg.Ages {
		switch {
		case n == from:
		case n == p.self:
			ages[n] = age
		case p.counts(n, now):
			ages[n] = age
			p.sign(n, now.Add(-age-relayAllowance))
		}
	}
	if len(p.queue) == maxHeard {
		p.queue = append(p.queue[:0], p.queue[1:]...)
	}
	p.queue = append(p.queue, heard{node: from, ages: ages, at: now})
	select {
	case p.kick <- struct{}{}:
	default:
	}
	ofSelf, reported := ages[p.self]
	return from, p.answer(from, answerNow(ofSelf, reported, before, now, p.timings.suspect), now)
}

// answer reports whether a peer that asked (want) is answered at now: at
// most once per answerEvery. A peer asks at most once a renew interval,
// so this never holds an answer back from one that follows the protocol;
// it bounds what a flood of datagrams, genuine or replayed, makes this
// node send. Called with mu held.
func (p *speaker) answer(peer string, want bool, now time.Time) bool {
	if !want || now.Sub(p.answered[peer]) < p.timings.renew/answerEvery {
		return false
	}
	p.answered[peer] = now
	return true
}

func (p *speaker) sign(node string, t time.Time) {
	if t.After(p.signs[node]) {
		p.signs[node] = t
	}
}

// take returns what arrived since the loop last took it, oldest first.
func (p *speaker) take() []heard {
	p.mu.Lock()
	defer p.mu.Unlock()
	q := p.queue
	p.queue = nil
	return q
}

// speak sends this node's datagram to the peers the fan-out chooses for
// this renew interval.
func (p *speaker) speak(now time.Time) {
	p.mu.Lock()
	var to []string
	if p.speaking(now) {
		to = p.fan.tick(p.self, p.names, p.signOf, p.timings, now)
	}
	p.mu.Unlock()
	p.send(now, to...)
}

// ask sends this node's datagram to the peers whose sign grew suspect old
// (fanout.due), and returns when the next one will.
func (p *speaker) ask(now time.Time) time.Time {
	p.mu.Lock()
	var to []string
	var next time.Time
	if p.speaking(now) {
		to, next = p.fan.due(p.names, p.signOf, p.timings, now)
	}
	p.mu.Unlock()
	p.send(now, to...)
	return next
}

func (p *speaker) signOf(node string) time.Time { return p.signs[node] }

// speaking reports whether this node sends datagrams at now: liveness over
// the LAN is on, and the loop made progress within speakQuietAfter (and
// has made some). Called with mu held.
func (p *speaker) speaking(now time.Time) bool {
	if p.conn == nil {
		return false
	}
	quiet, armed := p.watch.quiet(now)
	if silent := !armed || quiet > speakQuietAfter; silent != p.silent {
		p.silent = silent
		if silent && armed {
			p.log.Warn("the owner loop has made no progress; liveness datagrams stop until it does, and peers will judge this node dead", "since", quiet)
		} else if !silent {
			p.log.Info("liveness datagrams go out again")
		}
	}
	return !p.silent
}

// send sends this node's datagram to the named peers: the age at now of
// its latest sign of life of every node it knows, none older than two
// lease durations. It sends nothing while the loop has made no progress
// for speakQuietAfter, or before the loop first did.
func (p *speaker) send(now time.Time, names ...string) {
	if len(names) == 0 {
		return
	}
	p.mu.Lock()
	conn := p.conn
	if !p.speaking(now) {
		p.mu.Unlock()
		return
	}
	to := make([]lanlive.Peer, 0, len(names))
	for _, n := range names {
		if a, ok := p.peers[n]; ok {
			to = append(to, a)
		} else if a, ok := p.joinedFrom[n]; ok {
			to = append(to, lanlive.Peer{Node: n, Addr: a})
		}
	}
	ages := make(map[string]time.Duration, len(p.signs))
	for n, t := range p.signs {
		switch age := now.Sub(t); {
		case age >= 2*p.timings.duration:
			delete(p.signs, n)
		case age >= 0 && p.counts(n, now):
			ages[n] = age
		}
	}
	p.mu.Unlock()
	if err := conn.Send(to, lanlive.Message{From: p.self, Ages: ages}); err != nil {
		p.log.Debug("liveness datagrams not sent", "err", err)
		return
	}
	p.mu.Lock()
	if p.firstSent.IsZero() && len(to) > 0 {
		p.firstSent = now
	}
	p.mu.Unlock()
}

// sentFirst is when this node first sent a datagram on its current socket
// (zero: not yet); see lease.Liveness.Sending.
func (p *speaker) sentFirst() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.firstSent
}

// run takes in what arrives on in, speaks every renew interval and asks
// suspect peers when due, until stop is closed.
func (p *speaker) run(in <-chan lanlive.Received, stop <-chan struct{}) {
	p.mu.Lock()
	interval := p.timings.renew
	p.mu.Unlock()
	t := p.clk.NewTicker(interval)
	due := p.clk.NewTimer(interval)
	defer func() {
		t.Stop()
		due.Stop()
	}()
	for {
		select {
		case <-stop:
			return
		case rx := <-in:
			p.receive(rx)
			continue
		case <-t.C():
			now := p.clk.Now()
			p.speak(now)
			p.mu.Lock()
			changed := p.timings.renew != interval
			interval = p.timings.renew
			p.mu.Unlock()
			if changed {
				t.Stop()
				t = p.clk.NewTicker(interval)
			}
		case <-due.C():
		}
		// Signs only grow fresher between ticks, so the next question
		// comes no sooner than ask says: a timer that fires early finds
		// nothing due and is set again.
		now := p.clk.Now()
		next := p.ask(now)
		if next.IsZero() {
			next = now.Add(interval)
		}
		due.Reset(max(next.Sub(now), time.Millisecond))
	}
}
