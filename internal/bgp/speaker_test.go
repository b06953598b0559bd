package bgp

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"testing"
	"time"

	api "github.com/osrg/gobgp/v3/api"
	"github.com/osrg/gobgp/v3/pkg/server"
	"gotest.tools/v3/assert"
	"gotest.tools/v3/poll"

	"github.com/eip-project/eip/internal/config"
)

// A second GoBGP on loopback plays the router: the speaker connects to it
// (active only), announces a route with the MED of the lock's moves, and
// withdraws it.
func TestSpeakerAnnouncesAndWithdraws(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	assert.NilError(t, l.Close())

	ctx := context.Background()
	router := server.NewBgpServer(server.LoggerOption(logger{slog.New(slog.DiscardHandler)}))
	go router.Serve()
	t.Cleanup(router.Stop)
	assert.NilError(t, router.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{
		Asn: 64500, RouterId: "198.18.0.3", ListenPort: int32(port), ListenAddresses: []string{"127.0.0.1"},
	}}))
	assert.NilError(t, router.AddPeer(ctx, &api.AddPeerRequest{Peer: &api.Peer{
		Conf:      &api.PeerConf{NeighborAddress: "127.0.0.1", PeerAsn: 64512},
		Transport: &api.Transport{PassiveMode: true},
	}}))

	s := New(slog.New(slog.DiscardHandler), nil)
	t.Cleanup(s.Close)
	assert.NilError(t, s.Configure(config.BGP{ASN: 64512, Peers: []config.Peer{{
		Addr: netip.MustParseAddr("127.0.0.1"), ASN: 64500, Port: uint16(port), HoldTime: 9 * time.Second,
	}}}, netip.MustParseAddr("198.18.0.11")))
	ip := netip.MustParseAddr("198.19.100.1")
	assert.NilError(t, s.Announce(Route{IP: ip, MED: MEDFor(3), Communities: []uint32{64512<<16 | 100}}))

	meds := func() []uint32 {
		var out []uint32
		_ = router.ListPath(ctx, &api.ListPathRequest{TableType: api.TableType_GLOBAL,
			Family: &api.Family{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}}, func(d *api.Destination) {
			for _, p := range d.Paths {
				for _, a := range p.Pattrs {
					med := &api.MultiExitDiscAttribute{}
					if a.UnmarshalTo(med) == nil && d.Prefix == "198.19.100.1/32" {
						out = append(out, med.Med)
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
