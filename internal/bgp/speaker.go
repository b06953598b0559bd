package bgp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	api "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/config/oc"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"

	"github.com/eip-project/eip/internal/config"
)

// Route is a host route this node announces for an IP it holds.
type Route struct {
	IP netip.Addr
	// MED is the MULTI_EXIT_DISC; lower wins (see MEDFor).
	MED uint32
	// LocalPref is sent to iBGP peers when not zero.
	LocalPref   uint32
	Communities []uint32
}

// Equal reports whether r and o announce the same thing.
func (r Route) Equal(o Route) bool {
	return r.IP == o.IP && r.MED == o.MED && r.LocalPref == o.LocalPref && slices.Equal(r.Communities, o.Communities)
}

// MEDFor is the MED of a route for an IP whose lock has changed hands moves
// times: every change of holder lowers it by one, so the newest holder's
// route is preferred over any stale route of an earlier holder.
func MEDFor(moves int32) uint32 {
	return math.MaxUint32 - uint32(max(moves, 0))
}

// Session is the state of one BGP session.
type Session struct {
	Peer  netip.Addr
	ASN   uint32
	State string // idle, connect, active, opensent, openconfirm, established
	// Since is when the session was last established; zero when it is not.
	Since time.Time
	// UpdatesSent counts UPDATE messages sent on the session.
	UpdatesSent uint64
	// Received is how many routes from the peer the speaker holds (its
	// Adj-RIB-In): it uses none of them, and closes the session once
	// there are more than the peer's max-prefixes.
	Received uint64
}

// Up reports whether the session is established.
func (s Session) Up() bool { return s.State == "established" }

// Speaker is a BGP speaker. Configure, Announce and Withdraw are meant for
// one goroutine (the agent's loop); Sessions may be called from any.
type Speaker struct {
	log       *slog.Logger
	onSession func(Session)

	running  bool
	srv      *server.BgpServer
	listed   atomic.Pointer[server.BgpServer] // srv, for Sessions
	stopSrv  context.CancelFunc
	asn      uint32
	routerID netip.Addr
	peers    map[netip.Addr]config.Peer
	routes   map[netip.Addr]announced
}

type announced struct {
	route Route
	uuid  uuid.UUID // GoBGP's handle of the path, uuid.Nil while stopped
}

// New returns a stopped Speaker. onSession, if not nil, is called from
// GoBGP's goroutine whenever a session changes state.
func New(log *slog.Logger, onSession func(Session)) *Speaker {
	return &Speaker{
		log: log.With("component", "bgp"), onSession: onSession,
		peers: map[netip.Addr]config.Peer{}, routes: map[netip.Addr]announced{},
	}
}

// Configure applies the BGP configuration in force. routerID is used when
// the configuration names none. A change of AS number or router ID
// restarts the speaker (sessions reset); a change of peers touches only
// those peers. Routes announced so far stay announced.
func (s *Speaker) Configure(b config.BGP, routerID netip.Addr) error {
	if b.RouterID.IsValid() {
		routerID = b.RouterID
	}
	if !b.Enabled() {
		s.stop()
		return nil
	}
	if !routerID.Is4() {
		s.stop()
		return errors.New("bgp: no router ID: set bgp-router-id, or give the Node an IPv4 address")
	}
	if s.running && (s.asn != b.ASN || s.routerID != routerID) {
		s.stop()
	}
	if !s.running {
		if err := s.start(b.ASN, routerID); err != nil {
			return err
		}
	}
	var errs error
	want := map[netip.Addr]config.Peer{}
	for _, p := range b.Peers {
		p.Line = 0
		want[p.Addr] = p
	}
	for addr, p := range s.peers {
		if q, ok := want[addr]; !ok || q != p {
			if err := s.srv.DeletePeer(context.Background(), &api.DeletePeerRequest{Address: addr.String()}); err != nil {
				errs = errors.Join(errs, fmt.Errorf("bgp: remove peer %s: %w", addr, err))
			}
			delete(s.peers, addr)
		}
	}
	for addr, p := range want {
		if _, ok := s.peers[addr]; ok {
			continue
		}
		if err := s.srv.AddPeer(context.Background(), &api.AddPeerRequest{Peer: peerOf(p)}); err != nil {
			errs = errors.Join(errs, fmt.Errorf("bgp: add peer %s: %w", addr, err))
			continue
		}
		s.peers[addr] = p
		s.log.Info("peer added", "peer", addr, "asn", p.ASN, "port", p.Port, "holdTime", p.HoldTime)
	}
	return errs
}

func (s *Speaker) start(asn uint32, routerID netip.Addr) error {
	srv := server.NewBgpServer(server.LoggerOption(slog.New(quieter{s.log.Handler()}), nil))
	go srv.Serve()
	// ListenPort -1: active only, see the package comment. Families: the
	// two eipd announces; GoBGP's default, every family it knows, costs
	// 10 MiB of empty tables.
	err := srv.StartBgp(context.Background(), &api.StartBgpRequest{Global: &api.Global{
		Asn: asn, RouterId: routerID.String(), ListenPort: -1,
		Families: []uint32{uint32(oc.AFI_SAFI_TYPE_IPV4_UNICAST.ToInt()), uint32(oc.AFI_SAFI_TYPE_IPV6_UNICAST.ToInt())},
	}})
	if err != nil {
		srv.Stop()
		return fmt.Errorf("bgp: start speaker as %d with router ID %s: %w", asn, routerID, err)
	}
	if err := closePolicy(srv); err != nil {
		srv.Stop()
		return fmt.Errorf("bgp: start speaker as %d: %w", asn, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := srv.WatchEvent(ctx, server.WatchEventMessageCallbacks{OnPeerUpdate: s.peerEvent}, server.WatchPeer()); err != nil {
		cancel()
		srv.Stop()
		return fmt.Errorf("bgp: watch sessions: %w", err)
	}
	s.srv, s.stopSrv, s.running, s.asn, s.routerID = srv, cancel, true, asn, routerID
	s.listed.Store(srv)
	s.log.Info("speaker started", "asn", asn, "routerID", routerID)
	for ip, a := range s.routes {
		if err := s.add(ip, a.route); err != nil {
			s.log.Error("announce again after restart", "ip", ip, "err", err)
		}
	}
	return nil
}

// ownRoutes is the one policy, of one statement: a route this speaker
// originated (AddPath) is accepted; anything else is not.
const ownRoutes = "eip-own-routes"

// closePolicy makes srv a closed speaker. Its import policy, which GoBGP
// applies to its own routes too, rejects every route a peer sends, so no
// peer can put a route in its table; its export policy sends only its own
// routes, so nothing learnt from one peer could reach another (a route
// leak, with this node as next hop) even if the import policy let
// something in. What a peer sends is still held in its Adj-RIB-In while
// the session lasts: the peer's prefix limit (peerOf) ends that.
func closePolicy(srv *server.BgpServer) error {
	ctx := context.Background()
	err := srv.AddPolicy(ctx, &api.AddPolicyRequest{Policy: &api.Policy{Name: ownRoutes, Statements: []*api.Statement{{
		Name:       ownRoutes,
		Conditions: &api.Conditions{RouteType: api.Conditions_ROUTE_TYPE_LOCAL},
		Actions:    &api.Actions{RouteAction: api.RouteAction_ROUTE_ACTION_ACCEPT},
	}}}})
	if err != nil {
		return fmt.Errorf("add policy %s: %w", ownRoutes, err)
	}
	for _, a := range []*api.PolicyAssignment{
		{Name: "global", Direction: api.PolicyDirection_POLICY_DIRECTION_IMPORT, DefaultAction: api.RouteAction_ROUTE_ACTION_REJECT, Policies: []*api.Policy{{Name: ownRoutes}}},
		{Name: "global", Direction: api.PolicyDirection_POLICY_DIRECTION_EXPORT, DefaultAction: api.RouteAction_ROUTE_ACTION_REJECT, Policies: []*api.Policy{{Name: ownRoutes}}},
	} {
		if err := srv.SetPolicyAssignment(ctx, &api.SetPolicyAssignmentRequest{Assignment: a}); err != nil {
			return fmt.Errorf("set %s policy: %w", strings.ToLower(a.Direction.String()), err)
		}
	}
	return nil
}

func (s *Speaker) stop() {
	if !s.running {
		return
	}
	s.stopSrv()
	if err := s.srv.StopBgp(context.Background(), &api.StopBgpRequest{}); err != nil {
		s.log.Warn("stop speaker", "err", err)
	}
	s.srv.Stop()
	s.running, s.srv = false, nil
	s.listed.Store(nil)
	clear(s.peers)
	for ip, a := range s.routes {
		s.routes[ip] = announced{route: a.route}
	}
	s.log.Info("speaker stopped")
}

// Close stops the speaker; its sessions close, so peers drop its routes.
func (s *Speaker) Close() { s.stop() }

// Announce announces r, or replaces what was announced for r.IP.
func (s *Speaker) Announce(r Route) error {
	if a, ok := s.routes[r.IP]; ok && a.route.Equal(r) && (a.uuid != uuid.Nil || !s.running) {
		return nil
	}
	s.routes[r.IP] = announced{route: r}
	if !s.running {
		return nil
	}
	return s.add(r.IP, r)
}

func (s *Speaker) add(ip netip.Addr, r Route) error {
	res, err := s.srv.AddPath(apiutil.AddPathRequest{Paths: []*apiutil.Path{pathOf(r)}})
	if err != nil {
		return fmt.Errorf("bgp: announce %s: %w", ip, err)
	}
	s.routes[ip] = announced{route: r, uuid: res[0].UUID}
	return nil
}

// Withdraw withdraws the route for ip, if one is announced. GoBGP sends the
// withdrawal to every established peer before it handles the next request.
func (s *Speaker) Withdraw(ip netip.Addr) error {
	a, ok := s.routes[ip]
	if !ok {
		return nil
	}
	delete(s.routes, ip)
	if !s.running || a.uuid == uuid.Nil {
		return nil
	}
	if err := s.srv.DeletePath(apiutil.DeletePathRequest{UUIDs: []uuid.UUID{a.uuid}}); err != nil {
		return fmt.Errorf("bgp: withdraw %s: %w", ip, err)
	}
	return nil
}

// Announced is the number of routes announced.
func (s *Speaker) Announced() int { return len(s.routes) }

// Sessions lists the sessions, sorted by peer address. It is safe to call
// from any goroutine while the owner configures the speaker.
func (s *Speaker) Sessions() []Session {
	srv := s.listed.Load()
	if srv == nil {
		return nil
	}
	var out []Session
	_ = srv.ListPeer(context.Background(), &api.ListPeerRequest{}, func(p *api.Peer) {
		out = append(out, s.sessionOf(p))
	})
	slices.SortFunc(out, func(a, b Session) int { return a.Peer.Compare(b.Peer) })
	return out
}

func (s *Speaker) peerEvent(pe *apiutil.WatchEventMessage_PeerEvent, _ time.Time) {
	if pe.Type != apiutil.PEER_EVENT_STATE {
		return
	}
	p := pe.Peer
	addr := p.State.NeighborAddress
	if !addr.IsValid() {
		addr = p.Conf.NeighborAddress
	}
	// The API's states count from "unspecified", GoBGP's from idle: GoBGP
	// converts them so itself.
	sess := Session{Peer: addr, ASN: p.Conf.PeerASN, State: stateName(api.PeerState_SessionState(p.State.SessionState + 1))}
	s.log.Info("session state", "peer", sess.Peer, "state", sess.State)
	if s.onSession != nil {
		s.onSession(sess)
	}
}

func (s *Speaker) sessionOf(p *api.Peer) Session {
	addr, _ := netip.ParseAddr(p.GetState().GetNeighborAddress())
	if !addr.IsValid() {
		addr, _ = netip.ParseAddr(p.GetConf().GetNeighborAddress())
	}
	sess := Session{Peer: addr, ASN: p.GetConf().GetPeerAsn(), State: stateName(p.GetState().GetSessionState())}
	if sess.Up() {
		if u := p.GetTimers().GetState().GetUptime(); u != nil {
			sess.Since = u.AsTime()
		}
	}
	sess.UpdatesSent = p.GetState().GetMessages().GetSent().GetUpdate()
	for _, af := range p.GetAfiSafis() {
		sess.Received += af.GetState().GetReceived()
	}
	return sess
}

func stateName(st api.PeerState_SessionState) string {
	switch st {
	case api.PeerState_SESSION_STATE_IDLE, api.PeerState_SESSION_STATE_UNSPECIFIED:
		return "idle"
	case api.PeerState_SESSION_STATE_CONNECT:
		return "connect"
	case api.PeerState_SESSION_STATE_ACTIVE:
		return "active"
	case api.PeerState_SESSION_STATE_OPENSENT:
		return "opensent"
	case api.PeerState_SESSION_STATE_OPENCONFIRM:
		return "openconfirm"
	case api.PeerState_SESSION_STATE_ESTABLISHED:
		return "established"
	}
	return st.String()
}

// peerOf is GoBGP's peer configuration for p: one address family, that of
// the peer's address.
func peerOf(p config.Peer) *api.Peer {
	family := &api.Family{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}
	if p.Addr.Is6() {
		family.Afi = api.Family_AFI_IP6
	}
	hold := uint64(p.HoldTime / time.Second)
	peer := &api.Peer{
		Conf: &api.PeerConf{NeighborAddress: p.Addr.String(), PeerAsn: p.ASN, AuthPassword: p.Password},
		Timers: &api.Timers{Config: &api.TimersConfig{
			HoldTime: hold, KeepaliveInterval: max(hold/3, 1), ConnectRetry: 5,
		}},
		Transport: &api.Transport{RemotePort: uint32(p.Port)},
		// Over the limit, GoBGP sends a NOTIFICATION (Cease, maximum
		// number of prefixes reached), drops what the peer sent and
		// keeps the peer down until it is configured again (a change
		// of its line) or eipd restarts, as a router's maximum-prefix
		// without a restart interval does. It stores each UPDATE and
		// checks the limit before it reads the next, and stops reading
		// at the close, so what it holds for a moment is the limit and
		// what it read while the close took effect.
		AfiSafis: []*api.AfiSafi{{
			Config:       &api.AfiSafiConfig{Family: family, Enabled: true},
			PrefixLimits: &api.PrefixLimit{Family: family, MaxPrefixes: p.MaxPrefixes},
		}},
	}
	if p.Source.IsValid() {
		peer.Transport.LocalAddress = p.Source.String()
	}
	return peer
}

// pathOf is the GoBGP path announcing r with this node as next hop: an
// unspecified next hop, which GoBGP replaces with the session's local
// address.
func pathOf(r Route) *apiutil.Path {
	family, nextHop := bgp.RF_IPv4_UC, netip.IPv4Unspecified()
	if r.IP.Is6() {
		family, nextHop = bgp.RF_IPv6_UC, netip.IPv6Unspecified()
	}
	// Neither constructor fails for a valid address, and r.IP is one.
	nlri, _ := bgp.NewIPAddrPrefix(netip.PrefixFrom(r.IP, r.IP.BitLen()))
	nh, _ := bgp.NewPathAttributeNextHop(nextHop)
	attrs := []bgp.PathAttributeInterface{
		bgp.NewPathAttributeOrigin(bgp.BGP_ORIGIN_ATTR_TYPE_IGP),
		bgp.NewPathAttributeMultiExitDisc(r.MED),
		nh,
	}
	if r.LocalPref != 0 {
		attrs = append(attrs, bgp.NewPathAttributeLocalPref(r.LocalPref))
	}
	if len(r.Communities) > 0 {
		attrs = append(attrs, bgp.NewPathAttributeCommunities(r.Communities))
	}
	return &apiutil.Path{Family: family, Nlri: nlri, Attrs: attrs}
}
