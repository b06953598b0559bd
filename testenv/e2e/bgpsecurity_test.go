package e2e

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/eip-project/eip/internal/bgp"
	"github.com/eip-project/eip/internal/lease"
	"github.com/eip-project/eip/testenv"
)

// feedRoutes is the size of the table the feeder sends every node: what
// a router sending eipd more than its own routes might.
const feedRoutes = 100_000

// A closed speaker. The feeder, a second router in another AS, sends every
// node 100,000 host routes. The router, eipd's other peer, gets none of
// them from any node (it would take them: they come from another AS, with
// the node as next hop), while the holder's own route still reaches it.
// eipd closes the feeder's sessions at their prefix limit and drops what
// it got (eip_bgp_routes_received falls to 0), so it keeps none of the
// table, and its RSS rises by at most spikeBound over what it was. The
// first speaker kept all 100,000 and passed them on: its RSS grew by
// 83-92 MiB in 40 s, and on.
func TestRouteModeClosedSpeaker(t *testing.T) {
	t.Parallel()
	rt4, rt6 := testenv.RouterAddr()
	e := newRouteEnv(t,
		"ranges", "2001:db8:100::/112 announce=bgp",
		"bgp-peers", fmt.Sprintf("%s asn=%d\n%s asn=%d\n%s asn=%d",
			rt4, testenv.RouterASN, rt6, testenv.RouterASN, testenv.FeederAddr(), testenv.FeederASN))
	ip := testenv.RoutedServiceIP6(90)
	e.service("routed", ip)
	holder := e.routed(ip)

	before := map[string]int{}
	for _, n := range e.nodes {
		before[n] = e.rss(n)
	}
	mark := e.markLogs()
	f, err := e.c.StartFeeder(e.ctx, testenv.FeederOptions{Routes: feedRoutes})
	e.must(err)
	t.Cleanup(func() { e.must(f.Close()) })
	// Each node meets the table: it closes the session once the feeder
	// has sent more than its limit (and says so), or, without one, takes
	// it all.
	closedAt := "Key=" + testenv.FeederAddr().String()
	for _, n := range e.nodes {
		e.eventually("the feeder's table met by "+n, func() (bool, string) {
			for _, line := range strings.Split(e.logSince(mark, n), "\n") {
				if strings.Contains(line, `msg="prefix limit reached"`) && strings.Contains(line, closedAt) {
					return true, ""
				}
			}
			s, err := f.Session(e.ctx, n)
			if err != nil {
				return false, err.Error()
			}
			return s.State == "Established" && s.Exported == feedRoutes, fmt.Sprintf("%+v", s)
		})
	}
	// RSS rises while the table arrives: GoBGP stores each UPDATE's
	// routes and checks the limit before it reads the next, and stops
	// reading once the session closes, so a few thousand routes past the
	// limit come in (RSS up by 5 to 16 MiB here, from 30 MiB). GoBGP v3
	// parsed the table into a queue ahead of its limit check: up by 18 to
	// 77 MiB, from 28 MiB, of the DaemonSet's 128 MiB limit.
	const spikeBound = 20 << 20
	peak := map[string]int{}
	e.throughout("nothing passed on to the router, and eipd's RSS up by at most 20 MiB", 10*time.Second, func() string {
		var wrong []string
		for _, n := range e.nodes {
			want := 0
			if n == holder {
				want = 1
			}
			if got, err := e.c.RoutesFrom(e.ctx, n); err != nil || got != want {
				wrong = append(wrong, fmt.Sprintf("the router holds %d routes from %s, want its own %d (%v)", got, n, want, err))
			}
			rss := e.rss(n)
			peak[n] = max(peak[n], rss)
			if rss-before[n] > spikeBound {
				wrong = append(wrong, fmt.Sprintf("eipd's RSS on %s is %.1f MiB, from %.1f MiB", n, float64(rss)/(1<<20), float64(before[n])/(1<<20)))
			}
		}
		return strings.Join(wrong, "; ")
	})
	// Until the close drops them, eipd holds the routes that arrived
	// before it (about 5,000 for a moment here), then none. The session
	// stays closed: GoBGP does not connect again to a peer closed at its
	// limit.
	received := fmt.Sprintf("eip_bgp_routes_received{peer=%q}", testenv.FeederAddr())
	for _, n := range e.nodes {
		e.counterReaches(n, received, 0)
	}
	e.routed(ip)
	for _, n := range e.nodes {
		t.Logf("%s: eipd RSS %.1f MiB before the feeder, at most %.1f MiB in 10 s after, %.1f MiB now",
			n, float64(before[n])/(1<<20), float64(peak[n])/(1<<20), float64(e.rss(n))/(1<<20))
	}
}

// rss is the resident set size of eipd on node, in bytes.
func (e *env) rss(node string) int {
	e.t.Helper()
	pid := e.c.DaemonPID(node)
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	e.must(err)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			e.must(err)
			return kb << 10
		}
	}
	e.t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}

// A bad bgp-peers line is refused like any bad edit, quoted in each log,
// the InvalidConfig event, every heartbeat and kubectl eip status (which
// refusesEach checks), but with its password hidden, there and in
// everything eipd logged.
func TestBadBGPPeersHidePasswords(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	const password = "Sesame-1"
	bad := map[string]string{"bgp-asn": "64512", "bgp-peers": "198.18.0.3 asn=64500 password=" + password + " port=70000"}
	e.refusesEach([]badConfig{{"a bad bgp-peers line with a password", bad, `bgp-peers line 1 "198.18.0.3 asn=64500 password=*** port=70000"`}})
	for _, n := range e.nodes {
		b, err := os.ReadFile(e.c.DaemonLog(n))
		e.must(err)
		assert.Assert(t, !strings.Contains(string(b), password), "%s logged the password", n)
	}
	for _, ev := range e.events("ConfigMap", testenv.ConfigMap, "InvalidConfig") {
		assert.Assert(t, !strings.Contains(ev.Message, password), "an event shows the password: %s", ev.Message)
	}
}

// password-secret: a peer's TCP MD5 password comes from a Secret, which
// eipd may read with the shipped Role. Until the Secret exists every node
// says why the peer is left out (heartbeat, kubectl eip status); once it
// is created, every node's session with the feeder, which requires the
// password, comes up. Nothing shows the password.
func TestRouteModePasswordSecret(t *testing.T) {
	t.Parallel()
	const password = "Sesame-1#x"
	rt4, _ := testenv.RouterAddr()
	e := newRouteEnv(t, "bgp-peers", fmt.Sprintf("%s asn=%d\n%s asn=%d password-secret=%s",
		rt4, testenv.RouterASN, testenv.FeederAddr(), testenv.FeederASN, bgp.ShippedPasswordSecret))
	f, err := e.c.StartFeeder(e.ctx, testenv.FeederOptions{Password: password})
	e.must(err)
	t.Cleanup(func() { e.must(f.Close()) })

	missing := fmt.Sprintf("read Secret %s", bgp.ShippedPasswordSecret)
	for _, n := range e.nodes {
		e.eventually(n+" reports the missing Secret in its heartbeat", func() (bool, string) {
			hb := e.heartbeat(n)
			return strings.Contains(hb[lease.AnnotationError], missing), fmt.Sprint(hb[lease.AnnotationError])
		})
	}
	e.statusShows(missing)

	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: bgp.ShippedPasswordSecret}, Data: map[string][]byte{bgp.PasswordKey: []byte(password)}}
	_, err = e.k.CoreV1().Secrets(testenv.Namespace).Create(e.ctx, secret, metav1.CreateOptions{})
	e.must(err)
	t.Cleanup(func() {
		e.must(e.k.CoreV1().Secrets(testenv.Namespace).Delete(e.ctx, secret.Name, metav1.DeleteOptions{}))
	})
	for _, n := range e.nodes {
		e.eventually(n+"'s session with the feeder, with the password", func() (bool, string) {
			s, err := f.Session(e.ctx, n)
			if err != nil {
				return false, err.Error()
			}
			return s.State == "Established", fmt.Sprintf("%+v", s)
		})
		e.eventually(n+" reports no error", func() (bool, string) {
			hb := e.heartbeat(n)
			return hb[lease.AnnotationError] == "", fmt.Sprint(hb[lease.AnnotationError])
		})
		b, err := os.ReadFile(e.c.DaemonLog(n))
		e.must(err)
		assert.Assert(t, !strings.Contains(string(b), "Sesame"), "%s logged the password", n)
	}
}
