package netif

import (
	"context"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eip-project/eip/testenv/confine"
	"gotest.tools/v3/assert"
	"k8s.io/utils/clock"
)

// confinedEnv marks the copy of the test binary that
// TestAdaptersWithDaemonSetCapabilities runs with eipd's capabilities.
const confinedEnv = "EIP_NETIF_CONFINED"

// TestAdaptersWithDaemonSetCapabilities runs every adapter the way eipd
// runs in its pod, with the privileges of manifests/daemonset.yaml: only
// CAP_NET_ADMIN and CAP_NET_RAW, no way to gain more, /proc/sys and the
// root filesystem read-only. Opening netlink in a given namespace with setns(2)
// needs CAP_SYS_ADMIN, so an adapter that did would fail here.
func TestAdaptersWithDaemonSetCapabilities(t *testing.T) {
	if os.Getenv(confinedEnv) == "1" {
		t.Skip("this is the confined copy")
	}
	n := newTestNet(t)
	n.ip(t, n.a, "addr", "add", "198.18.0.1/24", "dev", vethIface)
	n.sysctl(t, n.b, "net.ipv4.conf."+vethIface+".arp_accept=1")
	n.sysctl(t, n.a, "net.ipv4.conf."+vethIface+".promote_secondaries=0")
	priv, err := confine.FromDaemonSet("../../manifests")
	assert.NilError(t, err)
	prog, argv, env := priv.Command(os.Args[0], []string{"-test.run=^TestConfinedAdapters$", "-test.count=1", "-test.v"})
	cmd := exec.Command("ip", append([]string{"netns", "exec", n.a, prog}, argv...)...)
	cmd.Env = append(append(os.Environ(), env...), confinedEnv+"=1")
	out, err := cmd.CombinedOutput()
	assert.NilError(t, err, "%s", out)
	assert.Assert(t, strings.Contains(string(out), "--- PASS: TestConfinedAdapters"), "%s", out)
	// The confined announcer's gratuitous ARP reached the peer.
	neigh := n.ip(t, n.b, "neigh", "show", "198.18.0.77", "dev", vethIface)
	assert.Assert(t, strings.Contains(neigh, "lladdr"), "no announcement of 198.18.0.77 reached the peer: %q", neigh)
	// Its devices died with it, addresses and all.
	assert.Assert(t, !strings.Contains(n.ip(t, n.a, "link", "show"), "eipd"), "the confined process's tuns outlived it")
}

// TestConfinedAdapters is the confined copy's work: bind, list (the
// kernel filtering by interface), find an IP's interface, watch,
// announce and delete, each an adapter eipd uses, and unbind a subnet's
// primary address without losing its secondaries (which changes a setting
// that /proc/sys, read-only here, cannot).
func TestConfinedAdapters(t *testing.T) {
	if os.Getenv(confinedEnv) != "1" {
		t.Skip("run by TestAdaptersWithDaemonSetCapabilities")
	}
	log := slog.New(slog.DiscardHandler)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	events := make(chan AddrEvent, 16)
	watchErr := make(chan error, 1)
	go func() { watchErr <- Watch(ctx, log, events, nil) }()

	a := NewAddresses(log)
	defer a.Close()
	// The devices, from the /dev/net/tun the manifest mounts, a second
	// opened later as eipd opens them; an address there is forever, and
	// the kernel answers ARP for it.
	tuns, err := OpenTuns(log)
	assert.NilError(t, err)
	second, err := tuns.Name(1)
	assert.NilError(t, err)
	onTun := netip.MustParsePrefix("198.18.0.78/32")
	assert.NilError(t, a.Add(second, onTun, 0))
	got, err := a.List(second)
	assert.NilError(t, err)
	assert.DeepEqual(t, got, []netip.Prefix{onTun}, cmpPrefix())
	assert.Assert(t, a.dumper.strict, "the kernel filters no listing by interface for eipd")
	iface, err := a.IfaceFor(netip.MustParseAddr("198.18.0.5"))
	assert.NilError(t, err)
	assert.Equal(t, iface, vethIface)
	answers, err := a.AnswersARP(vethIface)
	assert.NilError(t, err)
	assert.Assert(t, answers)

	p := netip.MustParsePrefix("198.18.0.77/32")
	assert.NilError(t, a.Add(vethIface, p, 5*time.Second))
	got, err = a.List(vethIface)
	assert.NilError(t, err)
	assert.Assert(t, slices.Contains(got, p), "listed %v", got)
	for ev := range events {
		if ev.Prefix == p && ev.Added {
			break
		}
	}
	ann := NewAnnouncer(log, clock.RealClock{}, nil)
	defer ann.Close()
	assert.NilError(t, ann.Announce(vethIface, p.Addr()))
	assert.NilError(t, a.Del(vethIface, p))
	got, err = a.List(vethIface)
	assert.NilError(t, err)
	assert.Assert(t, !slices.Contains(got, p), "still listed after Del: %v", got)

	primary, secondary := netip.MustParsePrefix("198.18.5.1/24"), netip.MustParsePrefix("198.18.5.2/24")
	assert.NilError(t, a.Add(vethIface, primary, 5*time.Second))
	assert.NilError(t, a.Add(vethIface, secondary, 5*time.Second))
	assert.NilError(t, a.Del(vethIface, primary))
	got, err = a.List(vethIface)
	assert.NilError(t, err)
	assert.Assert(t, slices.Contains(got, secondary), "the kernel dropped the secondary with its primary: %v", got)
	cancel()
	assert.NilError(t, <-watchErr)
}
