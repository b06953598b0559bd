package agent

import (
	"log/slog"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/utils/clock"

	"github.com/eip-project/eip/internal/config"
	"github.com/eip-project/eip/internal/lanlive"
	"github.com/eip-project/eip/internal/lease"
)

// lanState is liveness over the LAN (lan.go): the socket and its port,
// and what arrives on it (read by the speaker, lanspeaker.go, which also
// sends). Whether a peer no longer hears this node is this node's
// standing (self.unheard).
type lanState struct {
	lanConn LANConn
	lanPort uint16
	lanIn   chan lanlive.Received
	speaker *speaker
	// slowUntil: until then the watch is judged at the pace of slow
	// heartbeats (setTimings).
	slowUntil time.Time
	// Given when built: where it logs, this node's name, where the
	// nodes hear datagrams, and how to open the port (nil: never).
	log    *slog.Logger
	node   string
	nodes  nodeAddrs
	listen ListenLAN
}

// LANConn sends liveness datagrams to peers (lanlive.Conn): one message to
// every peer of to.
type LANConn interface {
	Send(to []lanlive.Peer, m lanlive.Message) error
	Close() error
}

// ListenLAN opens the liveness port, delivering to out what arrives from
// an address of the Node it names, as sentBy tells (lanlive.Listen).
type ListenLAN func(port uint16, sentBy lanlive.SentBy, out chan<- lanlive.Received) (LANConn, error)

// configure opens, moves or closes the liveness socket for cfg, and says
// whether it closed the one open (or none was). A port that cannot be
// opened leaves this node on heartbeat liveness alone: its heartbeat
// names no port and it renews every renew interval, so peers still judge
// it, only through the API server.
func (l *lanState) configure(cfg config.Config) (closed bool) {
	want := uint16(0)
	if cfg.LANLiveness() && l.listen != nil {
		want = cfg.LivenessPort
	}
	if want == l.lanPort && (want == 0) == (l.lanConn == nil) {
		return false
	}
	l.close()
	if want != 0 {
		conn, err := l.listen(want, l.nodes.sentBy, l.lanIn)
		if err != nil {
			l.log.Error("liveness over the LAN is off on this node; peers judge it from its heartbeat alone", "port", want, "err", err)
		} else {
			l.opened(conn, want)
			l.log.Info("liveness over the LAN", "port", want)
		}
	}
	return true
}

func newLANState(node string, clk clock.WithTicker, log *slog.Logger, watch *watchdog, nodes nodeAddrs, listen ListenLAN) lanState {
	return lanState{lanIn: make(chan lanlive.Received, 256), speaker: newSpeaker(node, clk, log, watch), log: log, node: node, nodes: nodes, listen: listen}
}

// opened keeps conn, the liveness socket open on port.
func (l *lanState) opened(conn LANConn, port uint16) { l.lanConn, l.lanPort = conn, port }

// start runs the speaker until stop closes.
func (l *lanState) start(stop chan struct{}) { go l.speaker.run(l.lanIn, stop) }

// configureSpeaker tells the speaker the socket and the timings in force.
func (l *lanState) configureSpeaker(t lanTimings) { l.speaker.configure(l.lanConn, t) }

// slowFor: the heartbeats are renewed slowly, slow apart, as of now; the
// watch is judged at that pace for two of those periods after they are
// renewed fast again (setTimings).
func (l *lanState) slowFor(now time.Time, slow time.Duration) { l.slowUntil = now.Add(2 * slow) }

// hear has live take in the datagrams the speaker heard since it was
// last asked, each at the time it arrived: a loop that ran late judges its
// peers by when they spoke, not by when it got round to reading them. It
// says whether that changed a verdict.
func (l *lanState) hear(live *lease.Liveness) (changed bool) {
	for _, h := range l.speaker.take() {
		changed = live.Datagram(h.node, h.ages, h.at) || changed
	}
	return changed
}

// sentFirst is when the speaker first sent since the socket opened, if it
// did (speaker.sentFirst).
func (l *lanState) sentFirst() time.Time { return l.speaker.sentFirst() }

// close closes the liveness socket, if open, and forgets its port.
func (l *lanState) close() {
	if l.lanConn != nil {
		if err := l.lanConn.Close(); err != nil {
			l.log.Warn("close the liveness port", "err", err)
		}
	}
	l.lanConn, l.lanPort = nil, 0
}

// setTimings tells the liveness tracker live what this node's LAN and
// heartbeat look like at now under d's configuration (unheard: a peer no
// longer hears this node). A peer heard within a lease duration is alive;
// the LAN counts as connected while some peer was heard within two renew
// intervals. Heartbeats renewed slowly come back through the watch only
// once per slow period, which is then what "the watch delivers" means.
func (l *lanState) setTimings(d *desired, live *lease.Liveness, unheard bool, now time.Time) {
	r := d.cfg.RenewInterval
	l.configureSpeaker(d.lanTimings())
	if l.lanConn == nil {
		live.SetLAN(0, 0, 0, 0)
		live.SetTimings(r, 2*r)
		return
	}
	live.SetLAN(d.cfg.LeaseDuration, 2*r, 4*r, d.suspectAfter())
	slow := r * time.Duration(d.cfg.SlowFactor(len(live.Nodes())))
	if l.slow(live, unheard, now) {
		l.slowFor(now, slow)
	}
	// Back to renewing every renew interval (a peer died, two are left),
	// the heartbeats in the watch keep their slow pace for a while yet:
	// judged against the fast one, their silence would look like a break
	// of the watch, and a break grants every node a fresh lease duration,
	// which would delay the very failover that made this node fast.
	if now.Before(l.slowUntil) {
		r = slow
	}
	live.SetTimings(r, 2*r)
}

// slow: this node's liveness goes over the LAN and, unless unheard, it
// hears at least two peers (live), so a peer that loses one of them
// still judges it over the LAN. Its heartbeat is then renewed slowly,
// every cfg.SlowFactor renew intervals: ten, or enough that the nodes
// together write heartbeat-writes a second (four by default, so beyond
// twenty nodes), so that the watch events the writes cause (one per
// write and eipd) grow with nodes, not nodes². With fewer peers (two
// nodes, or the last survivors) a peer that hears nobody would judge it
// from its heartbeat alone, so the heartbeat is renewed every renew
// interval.
func (l *lanState) slow(live *lease.Liveness, unheard bool, now time.Time) bool {
	return l.lanConn != nil && !unheard && live.LANPeers(now) >= 2
}

// tellPeers gives the speaker, on every tick, where this node's datagrams
// go and which nodes live knows: the peers whose heartbeat names a
// liveness port, with where each hears datagrams (its Node's address),
// and whether its heartbeat says it speaks only the format before.
func (l *lanState) tellPeers(live *lease.Liveness) {
	var peers map[string]lanlive.Peer
	if l.lanConn != nil {
		peers = map[string]lanlive.Peer{}
		for _, n := range live.Nodes() {
			hb, _ := live.Heartbeat(n)
			if n == l.node || hb.LivenessPort == 0 {
				continue
			}
			if addr, ok := l.nodes.peerAddr(n); ok {
				peers[n] = lanlive.Peer{Node: n, Addr: netip.AddrPortFrom(addr, hb.LivenessPort), Legacy: !hb.LivenessCurrent}
			}
		}
	}
	l.speaker.setPeers(peers, live.Nodes())
}

// nodeAddrs reads where nodes may be reached from their Node objects.
type nodeAddrs struct{ lister corelisters.NodeLister }

// peerAddr is where node hears datagrams: its first InternalIP, IPv4
// first, or else its first ExternalIP.
func (n nodeAddrs) peerAddr(node string) (netip.Addr, bool) {
	var best netip.Addr
	rank := func(t corev1.NodeAddressType, ip netip.Addr) int {
		r := 0
		if t != corev1.NodeInternalIP {
			r += 2
		}
		if !ip.Is4() {
			r++
		}
		return r
	}
	bestRank := 4
	for _, a := range n.of(node) {
		if r := rank(a.Type, a.IP); r < bestRank {
			best, bestRank = a.IP, r
		}
	}
	return best, best.IsValid()
}

type nodeAddr struct {
	Type corev1.NodeAddressType
	IP   netip.Addr
}

// of is the InternalIP and ExternalIP addresses of node.
func (n nodeAddrs) of(node string) []nodeAddr {
	obj, err := n.lister.Get(node)
	if err != nil {
		return nil
	}
	var out []nodeAddr
	for _, a := range obj.Status.Addresses {
		if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
			continue
		}
		if ip, err := netip.ParseAddr(a.Address); err == nil {
			out = append(out, nodeAddr{a.Type, ip.Unmap()})
		}
	}
	return out
}

// sentBy reports whether source is an address of node's Node object. The
// liveness socket asks, from its own goroutine, before it keeps anything
// of a datagram (lanlive.Session.Admit): the Node lister is safe to share.
func (n nodeAddrs) sentBy(node string, source netip.Addr) bool {
	for _, a := range n.of(node) {
		if a.IP == source {
			return true
		}
	}
	return false
}
