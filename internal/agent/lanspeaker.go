package agent

import (
	"log/slog"
	"net/netip"
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
	// sentBy reports whether source is an address of node's Node object
	// (read from the informer's cache, safe from any goroutine).
	sentBy func(node string, source netip.Addr) bool

	mu       sync.Mutex
	conn     LANConn // nil: liveness over the LAN is off
	interval time.Duration
	duration time.Duration
	to       []netip.AddrPort
	known    map[string]bool
	// signs is the latest sign of life of each known node: when its
	// datagram arrived, or when a peer's datagram said it last had one.
	signs  map[string]time.Time
	queue  []heard
	silent bool
	// kick wakes the loop when the queue was empty and is not.
	kick chan struct{}
}

func newSpeaker(self string, clk clock.WithTicker, log *slog.Logger, watch *watchdog, sentBy func(string, netip.Addr) bool) *speaker {
	return &speaker{self: self, clk: clk, log: log, watch: watch, sentBy: sentBy,
		signs: map[string]time.Time{}, known: map[string]bool{}, kick: make(chan struct{}, 1)}
}

// configure gives the speaker the liveness socket (nil: off) and the
// timings: it sends every renew interval and reports signs younger than
// two lease durations. Turned off, it forgets what it heard.
func (p *speaker) configure(conn LANConn, renew, lease time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conn, p.interval, p.duration = conn, renew, lease
	if conn == nil {
		clear(p.signs)
		p.queue = nil
	}
}

// setPeers tells the speaker where its datagrams go and which nodes the
// loop knows (whose heartbeats it observed): only their datagrams and
// signs count, as in lease.Liveness.
func (p *speaker) setPeers(to []netip.AddrPort, known []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.to = to
	clear(p.known)
	for _, n := range known {
		p.known[n] = true
	}
}

// receive takes in a datagram as it arrives. It counts only when it comes
// from an address of the Node it names: another machine on the LAN cannot
// speak for a node (it could still keep a dead node alive by forging its
// source; liveness-port can be closed to the LAN's other hosts, see
// docs/operating.md).
func (p *speaker) receive(rx lanlive.Received) {
	now := p.clk.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn == nil || rx.Msg.From == p.self || !p.known[rx.Msg.From] {
		return
	}
	if !p.sentBy(rx.Msg.From, rx.Source) {
		p.log.Debug("liveness datagram from an address that is not its node's; dropped", "node", rx.Msg.From, "source", rx.Source)
		return
	}
	p.sign(rx.Msg.From, now)
	for n, age := range rx.Msg.Ages {
		if n != p.self && n != rx.Msg.From && p.known[n] {
			p.sign(n, now.Add(-age))
		}
	}
	if len(p.queue) == maxHeard {
		p.queue = append(p.queue[:0], p.queue[1:]...)
	}
	p.queue = append(p.queue, heard{node: rx.Msg.From, ages: rx.Msg.Ages, at: now})
	select {
	case p.kick <- struct{}{}:
	default:
	}
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

// speak sends this node's datagram to its peers: the age at now of its
// latest sign of life of every node it knows, none older than two lease
// durations. It sends nothing while the loop has made no progress for
// speakQuietAfter, or before the loop first did.
func (p *speaker) speak(now time.Time) {
	quiet, armed := p.watch.quiet(now)
	p.mu.Lock()
	conn, to := p.conn, p.to
	if conn == nil || len(to) == 0 {
		p.mu.Unlock()
		return
	}
	if silent := !armed || quiet > speakQuietAfter; silent != p.silent {
		p.silent = silent
		if silent && armed {
			p.log.Warn("the owner loop has made no progress; liveness datagrams stop until it does, and peers will judge this node dead", "since", quiet)
		} else if !silent {
			p.log.Info("liveness datagrams go out again")
		}
	}
	if p.silent {
		p.mu.Unlock()
		return
	}
	ages := make(map[string]time.Duration, len(p.signs))
	for n, t := range p.signs {
		switch age := now.Sub(t); {
		case age >= 2*p.duration:
			delete(p.signs, n)
		case age >= 0 && p.known[n]:
			ages[n] = age
		}
	}
	p.mu.Unlock()
	msg := lanlive.Encode(lanlive.Message{From: p.self, Ages: ages})
	if err := conn.Send(to, msg); err != nil {
		p.log.Debug("liveness datagrams not sent", "err", err)
	}
}

// run takes in what arrives on in and speaks every renew interval, until
// stop is closed.
func (p *speaker) run(in <-chan lanlive.Received, stop <-chan struct{}) {
	p.mu.Lock()
	interval := p.interval
	p.mu.Unlock()
	t := p.clk.NewTicker(interval)
	defer func() { t.Stop() }()
	for {
		select {
		case <-stop:
			return
		case rx := <-in:
			p.receive(rx)
		case <-t.C():
			p.speak(p.clk.Now())
			p.mu.Lock()
			changed := p.interval != interval
			interval = p.interval
			p.mu.Unlock()
			if changed {
				t.Stop()
				t = p.clk.NewTicker(interval)
			}
		}
	}
}
