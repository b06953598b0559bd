package agent

import (
	"fmt"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/eip-project/eip/internal/lanlive"
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
	// heartbeats (setLANTimings).
	slowUntil time.Time
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

// configureLAN opens, moves or closes the liveness socket after the
// configuration changed (docs/design.md, Liveness over the LAN). A port
// that cannot be opened leaves this node on heartbeat liveness alone: its
// heartbeat names no port and it renews every renew interval, so peers
// still judge it, only through the API server.
func (s *state) configureLAN() {
	want := uint16(0)
	if s.desired.cfg.LANLiveness() && s.a.opt.ListenLAN != nil {
		want = s.desired.cfg.LivenessPort
	}
	if want == s.lan.lanPort && (want == 0) == (s.lan.lanConn == nil) {
		s.setLANTimings()
		return
	}
	s.closeLAN()
	if want != 0 {
		conn, err := s.a.opt.ListenLAN(want, s.sentBy, s.lan.lanIn)
		if err != nil {
			s.log.Error("liveness over the LAN is off on this node; peers judge it from its heartbeat alone", "port", want, "err", err)
		} else {
			s.lan.opened(conn, want)
			s.log.Info("liveness over the LAN", "port", want)
		}
	}
	s.setLANTimings()
}

// opened keeps conn, the liveness socket open on port.
func (l *lanState) opened(conn LANConn, port uint16) { l.lanConn, l.lanPort = conn, port }

// start runs the speaker until stop closes.
func (l *lanState) start(stop chan struct{}) { go l.speaker.run(l.lanIn, stop) }

// configureSpeaker tells the speaker the socket and the timings in force.
func (l *lanState) configureSpeaker(t lanTimings) { l.speaker.configure(l.lanConn, t) }

// slowFor: the heartbeats are renewed slowly, slow apart, as of now; the
// watch is judged at that pace for two of those periods after they are
// renewed fast again (setLANTimings).
func (l *lanState) slowFor(now time.Time, slow time.Duration) { l.slowUntil = now.Add(2 * slow) }

// heard is what the speaker heard since it was last asked.
func (l *lanState) heard() []heard { return l.speaker.take() }

// tell gives the speaker where this node's datagrams go (peers) and the
// nodes the loop knows.
func (l *lanState) tell(peers map[string]lanlive.Peer, nodes []string) {
	l.speaker.setPeers(peers, nodes)
}

// sentFirst is when the speaker first sent since the socket opened, if it
// did (speaker.sentFirst).
func (l *lanState) sentFirst() time.Time { return l.speaker.sentFirst() }

// closed forgets the liveness port, closed.
func (l *lanState) closed() { l.lanConn, l.lanPort = nil, 0 }

func (s *state) closeLAN() {
	if s.lan.lanConn != nil {
		if err := s.lan.lanConn.Close(); err != nil {
			s.log.Warn("close the liveness port", "err", err)
		}
	}
	s.lan.closed()
	s.self.lanClosed()
}

// setLANTimings tells the liveness tracker what this node's LAN and
// heartbeat look like now. A peer heard within a lease duration is alive;
// the LAN counts as connected while some peer was heard within two renew
// intervals. Heartbeats renewed slowly come back through the watch only
// once per slow period, which is then what "the watch delivers" means.
func (s *state) setLANTimings() {
	r := s.desired.cfg.RenewInterval
	s.lan.configureSpeaker(s.desired.lanTimings())
	if s.lan.lanConn == nil {
		s.live.SetLAN(0, 0, 0, 0)
		s.live.SetTimings(r, 2*r)
		return
	}
	now := s.clk.Now()
	s.live.SetLAN(s.desired.cfg.LeaseDuration, 2*r, 4*r, s.desired.suspectAfter())
	slow := r * time.Duration(s.slowFactor())
	if s.lanSlow(now) {
		s.lan.slowFor(now, slow)
	}
	// Back to renewing every renew interval (a peer died, two are left),
	// the heartbeats in the watch keep their slow pace for a while yet:
	// judged against the fast one, their silence would look like a break
	// of the watch, and a break grants every node a fresh lease duration,
	// which would delay the very failover that made this node fast.
	if now.Before(s.lan.slowUntil) {
		r = slow
	}
	s.live.SetTimings(r, 2*r)
}

// lanSlow: this node's liveness goes over the LAN and it hears at least two
// peers, so a peer that loses one of them still judges it over the LAN.
// Its heartbeat is then renewed slowly. With fewer peers (two nodes, or
// the last survivors) a peer that hears nobody would judge it from its
// heartbeat alone, so the heartbeat is renewed every renew interval.
func (s *state) lanSlow(now time.Time) bool {
	return s.lan.lanConn != nil && !s.self.unheard && s.live.LANPeers(now) >= 2
}

// slowFactor is how many renew intervals a slow heartbeat lasts: ten, or
// enough that the nodes together write heartbeat-writes a second (four by
// default, so beyond twenty nodes). The watch events the writes cause (one
// per write and eipd) then grow with nodes, not nodes².
func (s *state) slowFactor() int {
	return s.desired.cfg.SlowFactor(len(s.live.Nodes()))
}

// takeDatagrams takes in the datagrams the speaker heard since the loop
// last did, each at the time it arrived: a loop that ran late judges its
// peers by when they spoke, not by when it got round to reading them. It
// reports whether a pass is needed.
func (s *state) takeDatagrams() bool {
	changed := false
	for _, h := range s.lan.heard() {
		changed = s.live.Datagram(h.node, h.ages, h.at) || changed
	}
	return s.checkUnheard(s.clk.Now()) || changed
}

// tellSpeaker gives the speaker, on every tick, where this node's
// datagrams go and which nodes the loop knows.
func (s *state) tellSpeaker() {
	s.lan.tell(s.lanPeers(), s.live.Nodes())
}

// lanPeers are the peers whose heartbeat names a liveness port, with where
// each hears datagrams (its Node's address), and whether its heartbeat
// says it speaks only the format before.
func (s *state) lanPeers() map[string]lanlive.Peer {
	if s.lan.lanConn == nil {
		return nil
	}
	out := map[string]lanlive.Peer{}
	for _, n := range s.live.Nodes() {
		hb, _ := s.live.Heartbeat(n)
		if n == s.node || hb.LivenessPort == 0 {
			continue
		}
		if addr, ok := s.peerAddr(n); ok {
			out[n] = lanlive.Peer{Node: n, Addr: netip.AddrPortFrom(addr, hb.LivenessPort), Legacy: !hb.LivenessCurrent}
		}
	}
	return out
}

// peerAddr is where node hears datagrams: its first InternalIP, IPv4
// first, or else its first ExternalIP.
func (s *state) peerAddr(node string) (netip.Addr, bool) {
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
	for _, a := range s.nodeAddresses(node) {
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

// nodeAddresses are the InternalIP and ExternalIP addresses of node.
func (s *state) nodeAddresses(node string) []nodeAddr {
	n, err := s.a.nodes.Get(node)
	if err != nil {
		return nil
	}
	var out []nodeAddr
	for _, a := range n.Status.Addresses {
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
func (s *state) sentBy(node string, source netip.Addr) bool {
	for _, a := range s.nodeAddresses(node) {
		if a.IP == source {
			return true
		}
	}
	return false
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
		s.event(ip, corev1.EventTypeWarning, "Unheard", fmt.Sprintf("%s hands %s to a peer: peers do not hear its liveness datagrams (UDP port %d)", s.node, ip, s.lan.lanPort))
	}
	return true
}
