package e2e

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp/cmpopts"
	"gotest.tools/v3/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/eip-project/eip/internal/lease"
	"github.com/eip-project/eip/testenv"
)

// clientFollows waits until the client's neighbour cache sends ip's
// traffic to node's MAC.
func (e *env) clientFollows(ip netip.Addr, node string) {
	e.t.Helper()
	want := e.mac(node)
	e.eventually("client neighbour entry of "+ip.String()+" points at "+node, func() (bool, string) {
		neighs, err := e.c.ClientNeigh()
		if err != nil {
			return false, err.Error()
		}
		for _, n := range neighs {
			if n.IP == ip {
				return bytes.Equal(n.MAC, want), fmt.Sprintf("%s %s (%s)", n.MAC, n.State, e.nodeOfMAC(n.MAC))
			}
		}
		return false, "no entry"
	})
}

// An IPv6 external IP answers neighbour solicitations and pings from the
// holder alone, and the client's neighbour cache points at the holder.
func TestIPv6ExternalIPAnswers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	ip := testenv.ServiceIPv6(1)
	e.service("web6", ip)
	holder := e.served(ip)
	p := e.probe(ip)
	e.answersFrom(p, holder)
	e.noTwoMACs(p.Stop())
	e.clientFollows(ip, holder)
	assert.DeepEqual(t, e.testAddrs(holder), []netip.Prefix{netip.PrefixFrom(ip, 128)}, cmpopts.EquateComparable(netip.Prefix{}))
}

// The holder of an IPv6 address is SIGKILLed: a survivor takes over, the
// client's neighbour cache follows the unsolicited override NA, and pings
// are answered again.
func TestIPv6KilledHolderFailsOver(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	ip := testenv.ServiceIPv6(10)
	e.service("web6", ip)
	old := e.served(ip)
	p := e.probe(ip)
	e.answersFrom(p, old)
	e.clientFollows(ip, old)

	e.must(e.c.StopDaemon(old, syscall.SIGKILL))
	killed := time.Now()
	var next string
	e.eventually("a survivor holds "+ip.String(), func() (bool, string) {
		next = e.holder(ip)
		return next != "" && next != old, "holder " + next
	})
	e.answersFrom(p, next)
	e.clientFollows(ip, next)
	r := p.Stop()
	e.noTwoMACs(r)
	t.Logf("IPv6 failover after SIGKILL: answered by %s %s after the kill", next, firstReplyFrom(r, e.mac(next), killed))
	assert.DeepEqual(t, e.boundOn(ip), []string{next})
}

// A move requested on the lock hands an IPv6 address over with a gap of
// milliseconds and never two MACs; the client's neighbour cache follows.
func TestIPv6MoveFollowsNeighbourCache(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	ip := testenv.ServiceIPv6(20)
	e.service("web6", ip)
	old := e.served(ip)
	target := e.other(old)
	p := e.probe(ip)
	e.answersFrom(p, old)
	e.clientFollows(ip, old)

	asked := time.Now()
	_, err := e.k.CoordinationV1().Leases(testenv.Namespace).Update(e.ctx, lease.WithMoveTo(e.lock(ip), target), metav1.UpdateOptions{})
	assert.NilError(t, err)
	assert.Equal(t, e.served(ip), target)
	e.answersFrom(p, target)
	e.clientFollows(ip, target)
	r := p.Stop()
	e.noTwoMACs(r)
	gap := r.LongestGap()
	t.Logf("IPv6 move %s → %s: first reply from %s %s after the request, longest gap %s",
		old, target, target, firstReplyFrom(r, e.mac(target), asked), gap.Duration().Round(time.Millisecond))
	assert.Assert(t, gap.Duration() < time.Second, "gap %s", gap.Duration())
	_, hasMove := e.lock(ip).Annotations[lease.AnnotationMoveTo]
	assert.Assert(t, !hasMove, "the move request is cleared")
}

// api-loss hold watches the wire for NAs as well as ARP: a holder that
// loses the API server keeps its IPv6 address until a peer takes it over
// and announces it, then drops it at once. With heartbeats alone: over the
// LAN its peers would still hear it, and nobody would take over.
func TestIPv6HolderWithoutAPIDropsOnNA(t *testing.T) {
	t.Parallel()
	e := newEnv(t, heartbeatsConfig())
	ip := testenv.ServiceIPv6(30)
	e.service("web6", ip)
	old := e.served(ip)
	p := e.probe(ip)
	e.answersFrom(p, old)

	e.must(e.c.BlockAPI(e.ctx, old))
	t.Cleanup(func() { _ = e.c.UnblockAPI(e.ctx, old) })
	var next string
	e.eventually("a peer takes "+ip.String()+" over", func() (bool, string) {
		next = e.holder(ip)
		return next != "" && next != old, "holder " + next
	})
	took := time.Now()
	e.eventually(old+" drops "+ip.String()+" on the peer's NA", func() (bool, string) {
		on := e.boundOn(ip)
		return !slices.Contains(on, old), fmt.Sprint(on)
	})
	dropped := time.Since(took)
	e.answersFrom(p, next)
	e.clientFollows(ip, next)
	r := p.Stop()
	t.Logf("%s dropped %s within %s of the lock naming %s; %d sent, %d lost, longest gap %s, overlaps %v",
		old, ip, dropped.Round(time.Millisecond), next, r.Sent, r.Lost(), r.LongestGap().Duration().Round(time.Millisecond), r.Overlaps())
	// While its API connection is blocked nothing but the peer's NA could
	// remove the address: its lifetime is refreshed, the lock cannot be
	// read. (How long that takes is the peer's probe of an address an eip
	// node still answers for, then its NA.)
	assert.Assert(t, bytes.Contains([]byte(e.daemonLog(old)), []byte("another node claimed an address we hold")))
}

func (e *env) daemonLog(node string) string {
	e.t.Helper()
	b, err := os.ReadFile(e.c.DaemonLog(node))
	e.must(err)
	return string(b)
}
