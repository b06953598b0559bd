package bgp

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	api "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"
	"gotest.tools/v3/assert"
	"gotest.tools/v3/poll"

	"github.com/eip-project/eip/internal/config"
)

// startRouter starts a GoBGP that plays a router listening on addr (a
// loopback address) and waiting for the speaker to connect from 127.0.0.1.
func startRouter(t *testing.T, addr string, asn uint32) (*server.BgpServer, int) {
	t.Helper()
	l, err := net.Listen("tcp", addr+":0")
	assert.NilError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	assert.NilError(t, l.Close())

	ctx := context.Background()
	router := server.NewBgpServer(server.LoggerOption(slog.New(slog.DiscardHandler), nil))
	go router.Serve()
	t.Cleanup(router.Stop)
	assert.NilError(t, router.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{
		Asn: asn, RouterId: addr, ListenPort: int32(port), ListenAddresses: []string{addr},
	}}))
	assert.NilError(t, router.AddPeer(ctx, &api.AddPeerRequest{Peer: &api.Peer{
		Conf:      &api.PeerConf{NeighborAddress: "127.0.0.1", PeerAsn: 64512},
		Transport: &api.Transport{PassiveMode: true},
	}}))
	return router, port
}

// prefixes lists the IPv4 prefixes in a GoBGP's table, of routes from
// peers (adj-in of peer) or of its best paths (peer "").
func prefixes(srv *server.BgpServer, peer string) []string {
	req := apiutil.ListPathRequest{TableType: api.TableType_TABLE_TYPE_GLOBAL, Family: bgp.RF_IPv4_UC}
	if peer != "" {
		req.TableType, req.Name = api.TableType_TABLE_TYPE_ADJ_IN, peer
	}
	var out []string
	_ = srv.ListPath(req, func(prefix bgp.NLRI, _ []*apiutil.Path) { out = append(out, prefix.String()) })
	slices.Sort(out)
	return out
}

// A second GoBGP on loopback plays the router: the speaker connects to it
// (active only), announces a route with the MED of the lock's moves, and
// withdraws it.
func TestSpeakerAnnouncesAndWithdraws(t *testing.T) {
	router, port := startRouter(t, "127.0.0.1", 64500)

	s := New(slog.New(slog.DiscardHandler), nil)
	t.Cleanup(s.Close)
	assert.NilError(t, s.Configure(config.BGP{ASN: 64512, Peers: []config.Peer{{
		Addr: netip.MustParseAddr("127.0.0.1"), ASN: 64500, Port: uint16(port), HoldTime: 9 * time.Second,
	}}}, netip.MustParseAddr("198.18.0.11")))
	ip := netip.MustParseAddr("198.19.100.1")
	assert.NilError(t, s.Announce(Route{IP: ip, MED: MEDFor(3), Communities: []uint32{64512<<16 | 100}}))

	meds := func() []uint32 {
		var out []uint32
		_ = router.ListPath(apiutil.ListPathRequest{TableType: api.TableType_TABLE_TYPE_GLOBAL, Family: bgp.RF_IPv4_UC},
			func(prefix bgp.NLRI, paths []*apiutil.Path) {
				for _, p := range paths {
					for _, a := range p.Attrs {
						if med, ok := a.(*bgp.PathAttributeMultiExitDisc); ok && prefix.String() == "198.19.100.1/32" {
							out = append(out, med.Value)
						}
					}
				}
			})
		return out
	}
	poll.WaitOn(t, func(poll.LogT) poll.Result {
		if m := meds(); len(m) == 1 && m[0] == MEDFor(3) {
			return poll.Success()
		}
		return poll.Continue("router has %v; sessions %+v", meds(), s.Sessions())
	}, poll.WithTimeout(30*time.Second), poll.WithDelay(50*time.Millisecond))
	sess := s.Sessions()
	assert.Equal(t, len(sess), 1)
	assert.Assert(t, sess[0].Up() && sess[0].UpdatesSent >= 1, "%+v", sess)

	assert.NilError(t, s.Withdraw(ip))
	poll.WaitOn(t, func(poll.LogT) poll.Result {
		if len(meds()) == 0 {
			return poll.Success()
		}
		return poll.Continue("router still has %v", meds())
	}, poll.WithTimeout(30*time.Second), poll.WithDelay(50*time.Millisecond))
	assert.Equal(t, s.Announced(), 0)
}

func TestMEDFor(t *testing.T) {
	assert.Assert(t, MEDFor(1) < MEDFor(0), "a newer holder's MED is lower")
	assert.Equal(t, MEDFor(-1), MEDFor(0))
}

// The speaker is closed: it takes no route from a peer and passes none on.
// Router A sends it three routes; router B, another AS, gets only the
// speaker's own route, and the speaker's table holds nothing of A's.
func TestSpeakerAcceptsAndPassesOnNoRoute(t *testing.T) {
	a, portA := startRouter(t, "127.0.0.1", 64500)
	b, portB := startRouter(t, "127.0.0.2", 64501)
	var theirs []string
	for i := 1; i <= 3; i++ {
		ip := netip.AddrFrom4([4]byte{198, 18, 200, byte(i)})
		_, err := a.AddPath(apiutil.AddPathRequest{Paths: []*apiutil.Path{pathOf(Route{IP: ip})}})
		assert.NilError(t, err)
		theirs = append(theirs, ip.String()+"/32")
	}

	s := New(slog.New(slog.DiscardHandler), nil)
	t.Cleanup(s.Close)
	assert.NilError(t, s.Configure(config.BGP{ASN: 64512, Peers: []config.Peer{
		{Addr: netip.MustParseAddr("127.0.0.1"), ASN: 64500, Port: uint16(portA), HoldTime: 9 * time.Second, MaxPrefixes: 10},
		{Addr: netip.MustParseAddr("127.0.0.2"), ASN: 64501, Port: uint16(portB), HoldTime: 9 * time.Second, MaxPrefixes: 10},
	}}, netip.MustParseAddr("198.18.0.11")))
	poll.WaitOn(t, func(poll.LogT) poll.Result {
		if got := prefixes(s.srv, "127.0.0.1"); !slices.Equal(got, theirs) {
			return poll.Continue("the speaker got %v from A; sessions %+v", got, s.Sessions())
		}
		return poll.Success()
	}, poll.WithTimeout(30*time.Second), poll.WithDelay(50*time.Millisecond))
	assert.Equal(t, s.Sessions()[0].Received, uint64(3), "held, for the metric")
	assert.NilError(t, s.Announce(Route{IP: netip.MustParseAddr("198.19.100.1"), MED: MEDFor(0)}))

	poll.WaitOn(t, func(poll.LogT) poll.Result {
		if got := prefixes(b, ""); !slices.Contains(got, "198.19.100.1/32") {
			return poll.Continue("B has %v; sessions %+v", got, s.Sessions())
		}
		return poll.Success()
	}, poll.WithTimeout(30*time.Second), poll.WithDelay(50*time.Millisecond))
	assert.DeepEqual(t, prefixes(b, ""), []string{"198.19.100.1/32"})
	assert.DeepEqual(t, prefixes(s.srv, ""), []string{"198.19.100.1/32"})
}

// A peer that sends more prefixes than its limit loses its session: the
// speaker does not hold a full table for it.
func TestSpeakerClosesSessionOverPrefixLimit(t *testing.T) {
	ctx := context.Background()
	a, port := startRouter(t, "127.0.0.1", 64500)
	for i := 1; i <= 20; i++ {
		_, err := a.AddPath(apiutil.AddPathRequest{Paths: []*apiutil.Path{pathOf(Route{IP: netip.AddrFrom4([4]byte{198, 18, 200, byte(i)})})}})
		assert.NilError(t, err)
	}
	s := New(slog.New(slog.DiscardHandler), nil)
	t.Cleanup(s.Close)
	assert.NilError(t, s.Configure(config.BGP{ASN: 64512, Peers: []config.Peer{
		{Addr: netip.MustParseAddr("127.0.0.1"), ASN: 64500, Port: uint16(port), HoldTime: 9 * time.Second, MaxPrefixes: 10},
	}}, netip.MustParseAddr("198.18.0.11")))

	var notified uint64
	poll.WaitOn(t, func(poll.LogT) poll.Result {
		_ = a.ListPeer(ctx, &api.ListPeerRequest{}, func(p *api.Peer) {
			notified = p.GetState().GetMessages().GetReceived().GetNotification()
		})
		if notified == 0 {
			return poll.Continue("A got no NOTIFICATION; the speaker holds %d of its routes", len(prefixes(s.srv, "127.0.0.1")))
		}
		return poll.Success()
	}, poll.WithTimeout(30*time.Second), poll.WithDelay(50*time.Millisecond))
	assert.Assert(t, len(prefixes(s.srv, "127.0.0.1")) <= 10, "the session is closed, its routes dropped")
}
