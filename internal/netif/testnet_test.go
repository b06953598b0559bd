package netif

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/vishvananda/netns"
	"gotest.tools/v3/assert"
)

// testNet is two network namespaces, a and b, joined by a veth pair named
// vethIface on both sides, created for one test and removed after it.
type testNet struct {
	a, b string
}

const vethIface = "veth0"

func newTestNet(t testing.TB) *testNet {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces and veth pairs")
	}
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	id := fmt.Sprintf("%d-%s", os.Getpid(), hex.EncodeToString(suffix))
	n := &testNet{a: "eip-netif-a-" + id, b: "eip-netif-b-" + id}
	for _, ns := range []string{n.a, n.b} {
		run(t, "ip", "netns", "add", ns)
		t.Cleanup(func() {
			if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
				t.Errorf("delete namespace %s: %v: %s", ns, err, out)
			}
		})
	}
	n.ip(t, n.a, "link", "add", vethIface, "type", "veth", "peer", "name", vethIface, "netns", n.b)
	for _, ns := range []string{n.a, n.b} {
		n.ip(t, ns, "link", "set", "lo", "up")
		n.ip(t, ns, "link", "set", vethIface, "up")
	}
	return n
}

func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	assert.NilError(t, err, "%s %s: %s", name, strings.Join(args, " "), out)
	return string(out)
}

// ip runs ip(8) in namespace ns.
func (n *testNet) ip(t testing.TB, ns string, args ...string) string {
	t.Helper()
	return run(t, "ip", append([]string{"-n", ns}, args...)...)
}

func (n *testNet) sysctl(t testing.TB, ns, setting string) {
	t.Helper()
	run(t, "ip", "netns", "exec", ns, "sysctl", "-qw", setting)
}

// in runs fn on an OS thread inside namespace ns. Adapters created there
// stay bound to ns.
func (n *testNet) in(t testing.TB, ns string, fn func()) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	assert.NilError(t, err)
	defer orig.Close()
	h, err := netns.GetFromName(ns)
	assert.NilError(t, err)
	defer h.Close()
	assert.NilError(t, netns.Set(h))
	defer func() { assert.NilError(t, netns.Set(orig)) }()
	fn()
}

// goIn runs fn in a new goroutine inside namespace ns until it returns, and
// makes the test's cleanup cancel its context and wait for it.
func (n *testNet) goIn(t testing.TB, ns string, fn func(ctx context.Context) error) {
	t.Helper()
	h, err := netns.GetFromName(ns)
	assert.NilError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		defer h.Close()
		// The thread is left in ns; the runtime discards it when this
		// goroutine exits still locked.
		runtime.LockOSThread()
		if err := netns.Set(h); err != nil {
			done <- err
			return
		}
		done <- fn(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("goroutine in %s: %v", ns, err)
		}
	})
}

func (n *testNet) mac(t testing.TB, ns string) net.HardwareAddr {
	t.Helper()
	var links []struct {
		Address string `json:"address"`
	}
	assert.NilError(t, json.Unmarshal([]byte(n.ip(t, ns, "-j", "link", "show", "dev", vethIface)), &links))
	assert.Equal(t, len(links), 1)
	mac, err := net.ParseMAC(links[0].Address)
	assert.NilError(t, err)
	return mac
}

type shownAddr struct {
	Family    string `json:"family"`
	Local     string `json:"local"`
	PrefixLen int    `json:"prefixlen"`
	Scope     string `json:"scope"`
	ValidLft  uint32 `json:"valid_life_time"`
	PrefLft   uint32 `json:"preferred_life_time"`
}

// addrs returns what ip(8) shows on iface in ns.
func (n *testNet) addrs(t testing.TB, ns, iface string) []shownAddr {
	t.Helper()
	var links []struct {
		AddrInfo []shownAddr `json:"addr_info"`
	}
	assert.NilError(t, json.Unmarshal([]byte(n.ip(t, ns, "-j", "addr", "show", "dev", iface)), &links))
	if len(links) == 0 {
		return nil
	}
	return links[0].AddrInfo
}

// addr returns the entries for ip (any prefix length) on iface in ns.
func (n *testNet) addr(t testing.TB, ns, iface, ip string) []shownAddr {
	t.Helper()
	var out []shownAddr
	for _, a := range n.addrs(t, ns, iface) {
		if a.Local == ip {
			out = append(out, a)
		}
	}
	return out
}

// neigh returns the link-layer address and states of ns's neighbour entry
// for ip, or "" if it has none.
func (n *testNet) neigh(t testing.TB, ns, ip string) (string, []string) {
	t.Helper()
	var entries []struct {
		LLAddr string   `json:"lladdr"`
		State  []string `json:"state"`
	}
	assert.NilError(t, json.Unmarshal([]byte(n.ip(t, ns, "-j", "neigh", "show", ip, "dev", vethIface)), &entries))
	if len(entries) == 0 {
		return "", nil
	}
	return entries[0].LLAddr, entries[0].State
}

// testLogger writes through t.Log, so it must not outlive the test.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

var _ io.Writer = testWriter{}
