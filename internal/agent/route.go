package agent

import (
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/eip-project/eip/internal/bgp"
	"github.com/eip-project/eip/internal/config"
	"github.com/eip-project/eip/internal/ipset"
	"github.com/eip-project/eip/internal/lease"
)

// routing is route mode's state (route.go).
type routing struct {
	routerErr   string // why the route-mode configuration was refused
	bgpSessions string // lease.FormatBGPSessions of the sessions, for the heartbeat
	sessions    map[netip.Addr]sessionSeen
	announced   int // routes announced

	router   Router
	nodes    corelisters.NodeLister // for this node's router ID and its Events
	node     string
	log      *slog.Logger
	recorder record.EventRecorder
	metrics  Metrics
}

// Router announces host routes for the IPs this node holds in route-mode
// ranges (bgp.Router).
type Router interface {
	// Configure applies the configuration in force; routerID is this
	// node's IPv4 address, used unless the configuration names one.
	Configure(cfg config.Config, routerID netip.Addr) error
	// Announce announces r, or replaces the route announced for r.IP.
	Announce(r bgp.Route) error
	// Withdraw withdraws the route for ip, if any.
	Withdraw(ip netip.Addr) error
	// Sessions lists the BGP sessions and their states.
	Sessions() []bgp.Session
}

type nopRouter struct{}

func (nopRouter) Configure(config.Config, netip.Addr) error { return nil }
func (nopRouter) Announce(bgp.Route) error                  { return nil }
func (nopRouter) Withdraw(netip.Addr) error                 { return nil }
func (nopRouter) Sessions() []bgp.Session                   { return nil }

// sessionDownGrace is how long a session may take to come up before a
// Warning event says it has not: a connection attempt comes every one to
// two seconds.
const sessionDownGrace = 10 * time.Second

// sessionSeen is what this node last saw of one BGP session.
type sessionSeen struct {
	up        bool
	downSince time.Time // when it was last seen down, while it is
	warned    bool      // a Warning event says it is down
}

// observe reads the BGP sessions for the heartbeat at now, and hands
// Event on this node's Node for each session that came up, went down, or
// did not come up within sessionDownGrace (an unreachable peer, a wrong AS
// number; asn is this node's, for the message), and counts them.
func (r *routing) observe(now time.Time, asn uint32) {
	sessions := r.router.Sessions()
	out := make([]lease.BGPSession, 0, len(sessions))
	seen := make(map[netip.Addr]sessionSeen, len(sessions))
	for _, sess := range sessions {
		ls := lease.BGPSession{Peer: sess.Peer.String(), State: sess.State}
		if sess.Up() {
			since := sess.Since.UTC().Truncate(time.Second)
			ls.Since = &since
		}
		out = append(out, ls)
		was, known := r.sessions[sess.Peer]
		next := sessionSeen{up: sess.Up(), downSince: was.downSince, warned: was.warned}
		switch {
		case sess.Up():
			next.downSince, next.warned = time.Time{}, false
			if !was.up {
				r.sessionEvent(sess, corev1.EventTypeNormal, "BGPSessionUp", "established")
			}
		case was.up:
			next.downSince, next.warned = now, true
			r.sessionEvent(sess, corev1.EventTypeWarning, "BGPSessionDown", "went down ("+sess.State+"): this node's routes no longer reach that router")
		case !known:
			next.downSince = now
		case !was.warned && now.Sub(was.downSince) >= sessionDownGrace:
			next.warned = true
			r.sessionEvent(sess, corev1.EventTypeWarning, "BGPSessionDown", fmt.Sprintf("not established after %s (%s): check the peer's address and port, its AS number and this node's (bgp-asn %d), the password, and that the router accepts this node",
				sessionDownGrace, sess.State, asn))
		}
		seen[sess.Peer] = next
	}
	r.sessions = seen
	r.bgpSessions = lease.FormatBGPSessions(out)
	r.metrics.BGP(sessions, r.announced)
}

func (r *routing) sessionEvent(sess bgp.Session, kind, reason, what string) {
	msg := fmt.Sprintf("BGP session of %s with %s (AS %d) %s", r.node, sess.Peer, sess.ASN, what)
	r.log.Info("BGP session", "peer", sess.Peer, "state", sess.State, "event", reason)
	if n, err := r.nodes.Get(r.node); err == nil {
		r.recorder.Event(n, kind, reason, msg)
	}
}

// configure hands cfg, the configuration in force, to the router, and
// keeps why it was refused for the heartbeat's status. The router ID is
// the node's lowest internal IPv4 address, unique per node.
func (r *routing) configure(cfg config.Config) {
	var routerID netip.Addr
	if n, err := r.nodes.Get(r.node); err == nil {
		for _, a := range n.Status.Addresses {
			ip, err := netip.ParseAddr(a.Address)
			if err == nil && ip.Is4() && a.Type == corev1.NodeInternalIP && (!routerID.IsValid() || ip.Less(routerID)) {
				routerID = ip
			}
		}
	}
	if err := r.router.Configure(cfg, routerID); err != nil {
		if r.routerErr != err.Error() {
			r.log.Error("route mode", "err", err)
		}
		r.routerErr = err.Error()
		return
	}
	r.routerErr = ""
}

// retry configures the router again if it refused cfg, the configuration
// in force: what it could not do (read a password's Secret, start the
// speaker) may work now.
func (r *routing) retry(cfg config.Config) {
	if r.routerErr != "" {
		r.configure(cfg)
	}
}

// routeFor is the route announcing ip, held with e's binding: its MED
// falls with each change of holder, see bgp.MEDFor.
func routeFor(ip netip.Addr, e ipset.Entry, med uint32) bgp.Route {
	r := bgp.Route{IP: ip, MED: med}
	if rg := e.Binding.Range; rg != nil {
		r.LocalPref, r.Communities = rg.LocalPref, rg.Communities
	}
	return r
}

// announce announces a just bound IP, its lock moved moves times; a
// failure is logged, and the IP stays bound: the router may still learn
// it once the speaker recovers.
func (r *routing) announce(ip netip.Addr, e ipset.Entry, moves int32) bgp.Route {
	rt := routeFor(ip, e, bgp.MEDFor(moves))
	if err := r.router.Announce(rt); err != nil {
		r.log.Error("announce route", "ip", ip, "err", err)
	}
	r.announced++
	return rt
}

// withdraw withdraws the route of ip, before its address goes and before
// any lock write that gives the IP away, like the address itself.
func (r *routing) withdraw(ip netip.Addr) {
	if err := r.router.Withdraw(ip); err != nil {
		r.log.Error("withdraw route", "ip", ip, "err", err)
	}
	r.announced--
}

// reannounce updates the route of bound ip, announced as b says, if its
// range's route attributes changed with the configuration (e); it returns
// the route announced, and whether it changed.
func (r *routing) reannounce(ip netip.Addr, b binding, e ipset.Entry) (bgp.Route, bool) {
	if !b.announce.BGP() {
		return b.route, false
	}
	rt := routeFor(ip, e, b.route.MED)
	if rt.Equal(b.route) {
		return rt, false
	}
	if err := r.router.Announce(rt); err != nil {
		r.log.Error("announce route", "ip", ip, "err", err)
	}
	return rt, true
}
