package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	coordinationv1 "k8s.io/api/coordination/v1"

	"github.com/eip-project/eip/internal/cli"
	"github.com/eip-project/eip/internal/lease"
	"github.com/eip-project/eip/testenv"
)

// routeConfig has one ARP range and one route-mode range, and the router
// as every node's BGP peer.
func routeConfig() map[string]string {
	rt, _ := testenv.RouterAddr()
	return map[string]string{
		"ranges":    "198.18.100.0/24\n198.19.100.0/24 announce=bgp",
		"bgp-asn":   strconv.Itoa(testenv.NodeASN),
		"bgp-peers": fmt.Sprintf("%s asn=%d", rt, testenv.RouterASN),
	}
}

// newRouteEnv is newEnv with routeConfig and the extra key-value pairs,
// returning once every node's BGP session with the router is established:
// until then a node's announcements cannot reach the router.
func newRouteEnv(t *testing.T, extra ...string) *env {
	cfg := routeConfig()
	for i := 0; i+1 < len(extra); i += 2 {
		cfg[extra[i]] = extra[i+1]
	}
	e := newEnv(t, cfg)
	e.eventually("every node peered with the router", func() (bool, string) {
		states, err := e.c.BGPSessions(e.ctx)
		if err != nil {
			return false, err.Error()
		}
		for _, n := range e.nodes {
			if states[n] != "Established" {
				return false, fmt.Sprint(states)
			}
		}
		return true, ""
	})
	return e
}

// routed waits until ip is held, bound on its holder alone, and the router
// has exactly one best path for it: from the holder, via the holder's
// address. It returns the holder.
func (e *env) routed(ip netip.Addr) string {
	e.t.Helper()
	var holder string
	e.eventually(ip.String()+" routed to its holder alone", func() (bool, string) {
		holder = e.holder(ip)
		if holder == "" {
			return false, "no holder"
		}
		if on := e.boundOn(ip); len(on) != 1 || on[0] != holder {
			return false, fmt.Sprintf("holder %s, bound on %v", holder, on)
		}
		if msg := e.bestPathAt(ip, holder); msg != "" {
			return false, msg
		}
		return true, ""
	})
	return holder
}

// routedAway waits until another node than old holds ip, then as routed.
func (e *env) routedAway(ip netip.Addr, old string) string {
	e.t.Helper()
	e.eventually(ip.String()+" held by another node than "+old, func() (bool, string) {
		h := e.holder(ip)
		return h != "" && h != old, "holder " + h
	})
	return e.routed(ip)
}

// bestPathAt says what is wrong with the router's paths for ip, if its one
// best path is not node's.
func (e *env) bestPathAt(ip netip.Addr, node string) string {
	paths, err := e.c.BGPPaths(e.ctx, ip)
	if err != nil {
		return err.Error()
	}
	n, err := e.c.Node(node)
	e.must(err)
	via := n.IPv4
	if ip.Is6() {
		via = n.IPv6
	}
	var best []testenv.BGPPath
	for _, p := range paths {
		if p.Best {
			best = append(best, p)
		}
	}
	if len(best) != 1 || best[0].Node != node || best[0].Via != via {
		return fmt.Sprintf("holder %s (%s), router's paths %+v", node, via, paths)
	}
	return ""
}

// routedReplies waits until the routed client's probe is answered.
func (e *env) routedReplies(p *testenv.Probe, since time.Time) {
	e.t.Helper()
	e.eventually("routed client answered", func() (bool, string) {
		r := p.Result()
		if len(r.Replies) == 0 {
			return false, "no reply yet"
		}
		last := r.Replies[len(r.Replies)-1].At
		return last.After(since) && time.Since(last) < time.Second, fmt.Sprintf("last reply at %s", last.Format(time.StampMilli))
	})
}

func (e *env) routedProbe(ip netip.Addr) *testenv.Probe {
	e.t.Helper()
	p, err := e.c.RoutedProbe(ip, 0)
	e.must(err)
	e.t.Cleanup(func() { p.Stop() })
	return p
}

// firstReplyAfter is how long after t the probe was first answered.
func firstReplyAfter(r testenv.ProbeResult, t time.Time) time.Duration {
	for _, rep := range r.Replies {
		if rep.At.After(t) {
			return rep.At.Sub(t)
		}
	}
	return -1
}

// Route mode: the routed client reaches each IP through the router, whose
// one best path is the holder's; the IP lives on the holder's lo, and no
// node answers ARP for it on the LAN, while the ARP range beside it works
// as before.
func TestRouteModeServesThroughRouterOnly(t *testing.T) {
	t.Parallel()
	e := newRouteEnv(t)
	ips := []netip.Addr{testenv.RoutedServiceIP(10), testenv.RoutedServiceIP(11), testenv.RoutedServiceIP(12)}
	e.service("routed", ips...)
	lan := testenv.ServiceIP(10)
	e.service("lan", lan)
	e.served(lan)
	for _, ip := range ips {
		holder := e.routed(ip)
		e.reachedThroughRouterOnly(ip, holder)
	}
}

// reachedThroughRouterOnly checks that ip, routed to holder, is on the
// holder's eipd device, answers the routed client, and that no node answers ARP or
// neighbour solicitations for it on the LAN.
func (e *env) reachedThroughRouterOnly(ip netip.Addr, holder string) {
	e.t.Helper()
	out, err := e.c.Exec(e.ctx, holder, "ip", "-o", "addr", "show", "dev", testenv.EipdDevice)
	e.must(err)
	host := netip.PrefixFrom(ip, ip.BitLen()).String()
	assert.Assert(e.t, strings.Contains(string(out), host), "%s not on %s of %s: %s", host, testenv.EipdDevice, holder, out)

	p := e.routedProbe(ip)
	e.routedReplies(p, time.Now())
	p.Stop()

	macs, err := e.c.WhoAnswers(ip)
	e.must(err)
	assert.Equal(e.t, len(macs), 0, "a node answered the LAN for %s, a route-mode IP: %v", ip, macs)
}

// Route mode over IPv6: each node also peers with the router's IPv6
// address, a /128 is announced over that session, and the routed client
// reaches the IP from 2001:db8:1::/64; a move hands the route over, the
// old holder's withdrawal first.
func TestRouteModeIPv6(t *testing.T) {
	t.Parallel()
	rt4, rt6 := testenv.RouterAddr()
	e := newRouteEnv(t,
		"ranges", "198.19.100.0/24 announce=bgp\n2001:db8:100::/112 announce=bgp",
		"bgp-peers", fmt.Sprintf("%s asn=%d\n%s asn=%d", rt4, testenv.RouterASN, rt6, testenv.RouterASN))
	ip := testenv.RoutedServiceIP6(1)
	old, next, r := e.routedHandover(ip, func(ip netip.Addr, old string) {
		e.reachedThroughRouterOnly(ip, old)
		e.editLock(ip, func(l *coordinationv1.Lease) { l.Annotations[lease.AnnotationMoveTo] = e.other(old) })
	})
	e.reachedThroughRouterOnly(ip, next)
	t.Logf("IPv6 move %s -> %s through the router: %d sent, %d lost, longest gap %s", old, next, r.Sent, r.Lost(), r.LongestGap().Duration())
}

// birdLogLines returns the router's log lines about ip's host route.
func (e *env) birdLogLines(ip netip.Addr) []string {
	b, err := os.ReadFile(filepath.Join(e.c.Dir(), "bird.log"))
	e.must(err)
	var out []string
	route := " " + netip.PrefixFrom(ip, ip.BitLen()).String()
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, route) && (strings.Contains(l, " added ") || strings.Contains(l, " removed ") || strings.Contains(l, " replaced ")) {
			out = append(out, l)
		}
	}
	return out
}

// withdrawnBeforeAnnounced checks, in the router's log, that old's route
// for ip was withdrawn before next's was announced: drop before release.
func (e *env) withdrawnBeforeAnnounced(ip netip.Addr, from int, old, next string) {
	e.t.Helper()
	var lines []string
	e.eventually("the router logged both", func() (bool, string) {
		lines = e.birdLogLines(ip)[from:]
		return len(lines) >= 2, strings.Join(lines, "\n")
	})
	// BIRD names a node's sessions node_1 (IPv4) and node_1_v6, and logs
	// "node_1.ipv4 < added …".
	session := func(node string) string {
		if ip.Is6() {
			return strings.ReplaceAll(node, "-", "_") + "_v6."
		}
		return strings.ReplaceAll(node, "-", "_") + "."
	}
	oldProto, nextProto := session(old), session(next)
	removed, added := -1, -1
	for i, l := range lines {
		if removed < 0 && strings.Contains(l, oldProto) && strings.Contains(l, " removed ") {
			removed = i
		}
		if added < 0 && strings.Contains(l, nextProto) && strings.Contains(l, " added ") {
			added = i
		}
	}
	assert.Assert(e.t, removed >= 0 && added > removed, "withdrawal by %s not before the announcement by %s:\n%s", old, next, strings.Join(lines, "\n"))
}

// kubectl eip move in route mode: the old holder withdraws, then the new
// one announces; the routed client's gap is logged.
func TestRouteModeMove(t *testing.T) {
	t.Parallel()
	e := newRouteEnv(t)
	var target string
	old, next, r := e.routedHandover(testenv.RoutedServiceIP(20), func(ip netip.Addr, old string) {
		target = e.other(old)
		e.editLock(ip, func(l *coordinationv1.Lease) { l.Annotations[lease.AnnotationMoveTo] = target })
	})
	assert.Equal(t, next, target)
	t.Logf("move %s -> %s through the router: %d sent, %d lost, longest gap %s", old, next, r.Sent, r.Lost(), r.LongestGap().Duration())
}

// SIGTERM hands off; the route is withdrawn before the handoff.
func TestRouteModeGracefulStopWithdrawsFirst(t *testing.T) {
	t.Parallel()
	e := newRouteEnv(t)
	old, next, r := e.routedHandover(testenv.RoutedServiceIP(30), func(_ netip.Addr, old string) {
		e.must(e.c.StopDaemon(old, syscall.SIGTERM))
	})
	t.Logf("SIGTERM of %s, %s took over: longest gap %s", old, next, r.LongestGap().Duration())
}

// routedHandover routes ip, has handOver give it away from its holder while
// the routed client pings it, and checks that the router saw the old
// holder's withdrawal before the new holder's announcement.
func (e *env) routedHandover(ip netip.Addr, handOver func(ip netip.Addr, old string)) (old, next string, r testenv.ProbeResult) {
	e.t.Helper()
	e.service("routed", ip)
	old = e.routed(ip)
	p := e.routedProbe(ip)
	e.routedReplies(p, time.Now())
	logged := len(e.birdLogLines(ip))
	handOver(ip, old)
	next = e.routedAway(ip, old)
	e.routedReplies(p, time.Now())
	r = p.Stop()
	e.withdrawnBeforeAnnounced(ip, logged, old, next)
	return old, next, r
}

// The holder is killed and its link cut, so its BGP session, and its
// route, linger at the router until the 90 s hold timer. The survivor's
// route wins at once anyway (lower MED), long before that.
func TestRouteModeFailoverBeatsHoldTimer(t *testing.T) {
	t.Parallel()
	e := newRouteEnv(t)
	ip := testenv.RoutedServiceIP(40)
	e.service("routed", ip)
	old := e.routed(ip)
	p := e.routedProbe(ip)
	e.routedReplies(p, time.Now())

	e.must(e.c.CutLink(e.ctx, old))
	t.Cleanup(func() {
		_ = e.c.RestoreLink(e.ctx, old)
		// The router would keep the dead session until its hold timer;
		// later tests need the node's next eipd to peer at once.
		_ = e.c.RestartBGPSession(e.ctx, old)
	})
	e.must(e.c.StopDaemon(old, syscall.SIGKILL))
	killed := time.Now()
	next := e.routedAway(ip, old)
	e.routedReplies(p, killed)
	r := p.Stop()
	took := firstReplyAfter(r, killed)

	paths, err := e.c.BGPPaths(e.ctx, ip)
	e.must(err)
	stale := false
	for _, p := range paths {
		stale = stale || (p.Node == old && !p.Best)
	}
	assert.Assert(t, stale, "the dead holder's route should still linger at the router (hold timer %s): %+v", testenv.RouterHoldTime, paths)
	t.Logf("SIGKILL + link cut of %s: the routed client was answered again %s after the kill (via %s); the router's hold timer is %s; paths %+v",
		old, took, next, testenv.RouterHoldTime, paths)
}

// A peer with the wrong AS number and one nobody answers at: every node's
// status shows both sessions down, a Warning event says so, and the ARP
// range keeps working.
func TestRouteModeBadPeersAreReported(t *testing.T) {
	t.Parallel()
	rt, _ := testenv.RouterAddr()
	cfg := routeConfig()
	cfg["bgp-peers"] = fmt.Sprintf("%s asn=%d\n198.18.0.9 asn=%d", rt, testenv.RouterASN+1, testenv.RouterASN)
	e := newEnv(t, cfg)
	lan := testenv.ServiceIP(50)
	e.service("lan", lan)
	e.served(lan)
	e.eventually("kubectl eip status shows both sessions of every node down", func() (bool, string) {
		st := e.statusJSON()
		for _, n := range st.Nodes {
			if len(n.BGPSessions) != 2 {
				return false, fmt.Sprintf("%s: %+v", n.Name, n.BGPSessions)
			}
			for _, s := range n.BGPSessions {
				if s.State == "established" || s.State == "" {
					return false, fmt.Sprintf("%s: %+v", n.Name, n.BGPSessions)
				}
			}
		}
		return len(st.Nodes) == len(e.nodes), fmt.Sprint(st.Nodes)
	})
	wrongASN, nobody := fmt.Sprintf("%s (AS %d)", rt, testenv.RouterASN+1), "198.18.0.9 (AS"
	for _, n := range e.nodes {
		for _, peer := range []string{wrongASN, nobody} {
			e.eventually("a BGPSessionDown event on "+n+" for "+peer, func() (bool, string) {
				for _, ev := range e.events("Node", n, "BGPSessionDown") {
					if strings.Contains(ev.Message, peer) {
						t.Log(ev.Message)
						return true, ""
					}
				}
				return false, "none"
			})
		}
	}
	e.served(lan)
}

// statusJSON is `kubectl eip status -o json` as the plugin prints it.
func (e *env) statusJSON() cli.Status {
	e.t.Helper()
	bin := os.Getenv("KUBECTL_EIP_BIN")
	if bin == "" {
		e.t.Skip("KUBECTL_EIP_BIN is not set (make build)")
	}
	out, err := e.c.Exec(e.ctx, testenv.Client, bin, "--kubeconfig="+e.c.AdminKubeconfig(), "-n", testenv.Namespace, "status", "-o", "json")
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		e.t.Fatal(err)
	}
	var st cli.Status
	e.must(json.Unmarshal(out, &st))
	return st
}

// Policies apply to route-mode ranges unchanged: with spread, three IPs
// land on three nodes, and the router routes each to its holder.
func TestRouteModeSpread(t *testing.T) {
	t.Parallel()
	e := newRouteEnv(t, "policy", "spread")
	ips := []netip.Addr{testenv.RoutedServiceIP(60), testenv.RoutedServiceIP(61), testenv.RoutedServiceIP(62)}
	e.service("routed", ips...)
	e.eventually("one IP per node", func() (bool, string) {
		held := map[string]int{}
		for _, ip := range ips {
			held[e.holder(ip)]++
		}
		return len(held) == len(e.nodes) && held[""] == 0, fmt.Sprint(held)
	})
	for _, ip := range ips {
		e.routed(ip)
	}
}

// throughRouter is reach for the routed client, which sees only the
// router's MAC: an IP answers through its holder when the router's one
// best path for it is the holder's.
func (e *env) throughRouter(ips ...netip.Addr) reach {
	return reach{
		ips:   ips,
		serve: e.routed,
		probe: func(ip netip.Addr, _ string) *testenv.Probe {
			p := e.routedProbe(ip)
			e.routedReplies(p, time.Now())
			return p
		},
		answering: func(probes map[netip.Addr]*testenv.Probe, holders map[netip.Addr]string) func() string {
			return func() string {
				for ip, p := range probes {
					if msg := answeredWithin(p.Result(), time.Second); msg != "" {
						return msg
					}
					if msg := e.bestPathAt(ip, holders[ip]); msg != "" {
						return msg
					}
				}
				return ""
			}
		},
	}
}

// Preferred nodes and sticky in a BGP range: an IP whose Service prefers a
// node is routed to that node, falls back to another when it stops, and
// is routed to it again when it returns; an IP without a preference stays
// where it is when the node returns.
func TestRouteModePreferredAndSticky(t *testing.T) {
	t.Parallel()
	e := newRouteEnv(t)
	preferred := e.nodes[2]
	pref, free := testenv.RoutedServiceIP(80), testenv.RoutedServiceIP(81)
	e.preferService("preferred", preferred, pref)
	e.service("free", free)
	assert.Equal(t, e.routed(pref), preferred)
	e.routed(free)

	e.must(e.c.StopDaemon(preferred, syscall.SIGTERM))
	e.routedAway(pref, preferred)
	if e.holder(free) == preferred {
		e.routedAway(free, preferred)
	}
	stayed := e.lockStates(free)
	e.start(preferred)
	e.eventually(pref.String()+" back on "+preferred, func() (bool, string) {
		h := e.holder(pref)
		return h == preferred, "holder " + h
	})
	assert.Equal(t, e.routed(pref), preferred)
	e.throughout("sticky: "+free.String()+" stays", 3*leaseDuration, func() string {
		if h := e.holder(free); h != stayed[free].Holder {
			return "moved to " + h
		}
		return ""
	})
	e.assertNothingMoved(stayed, e.lockStates(free))
	e.routed(free)
}
