package e2e

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/eip-project/eip/internal/lease"
	"github.com/eip-project/eip/testenv"
)

// Bad input (issue 8): every invalid ConfigMap edit is refused with the
// same sentence in each daemon's log, in a Warning event on the ConfigMap,
// in every heartbeat's eip.io/error (which `kubectl eip status` shows),
// while the last good configuration stays in force; every address a
// Service names that eip must not bind is refused with an AddressRejected
// event on the Service and never bound.

// badConfig is one invalid edit and the text that explains it.
type badConfig struct {
	name string
	set  map[string]string
	want string
}

// Two tests, so that no daemon records more than the 25 Warning events on
// one object that client-go's spam filter lets through.
func TestBadConfigValues(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	e.refusesEach([]badConfig{
		{"duration that is not one", map[string]string{"lease-duration": "soon"}, `lease-duration "soon" is not a duration`},
		{"zero renew-interval", map[string]string{"renew-interval": "0"}, `renew-interval "0" must be positive`},
		{"negative lease-duration", map[string]string{"lease-duration": "-2s"}, `lease-duration "-2s" must be positive`},
		{"renew-interval not below lease-duration", map[string]string{"renew-interval": "2s"}, `renew-interval "2s" must be shorter than lease-duration`},
		{"renew-interval above half the lease", map[string]string{"renew-interval": "1500ms"}, `renew-interval "1500ms" must be at most half of lease-duration`},
		{"lease-duration below a second", map[string]string{"lease-duration": "800ms", "renew-interval": "200ms"}, `lease-duration "800ms" must be at least 1s`},
		{"lease-duration above an hour", map[string]string{"lease-duration": "2h"}, `lease-duration "2h" must be at most 1h0m0s`},
		{"fence-after not below lease-duration", map[string]string{"api-loss": "fence", "fence-after": "2s"}, `fence-after "2s" must be shorter than lease-duration`},
		{"fence-after not above renew-interval", map[string]string{"api-loss": "fence", "fence-after": "500ms"}, `fence-after "500ms" must be longer than renew-interval`},
		{"netmask out of range", map[string]string{"netmask": "33"}, `netmask "33"`},
		{"netmask of words", map[string]string{"netmask": "twenty-four"}, `netmask "twenty-four" is not a netmask`},
		{"netmask6 out of range", map[string]string{"netmask6": "129"}, `netmask6 "129"`},
		{"unknown policy", map[string]string{"policy": "random"}, `policy "random" is not a policy`},
		{"unknown api-loss", map[string]string{"api-loss": "panic"}, `api-loss "panic" is not supported`},
		{"node-selector that does not parse", map[string]string{"node-selector": "zone in (a"}, `node-selector "zone in (a" is not a label selector`},
		{"iface that is no interface name", map[string]string{"iface": "eth0 eth1"}, `iface "eth0 eth1"`},
		{"preferred-nodes that are no node names", map[string]string{"preferred-nodes": "Node_1"}, `"Node_1" is not a node name`},
	})
}

func TestBadConfigRanges(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	n1, err := e.c.Node(e.nodes[0])
	assert.NilError(t, err)
	e.refusesEach([]badConfig{
		{"a line that is no range", map[string]string{"ranges": "198.18.100.0/24\nnot-a-range"}, `ranges line 2 "not-a-range"`},
		{"reversed span", map[string]string{"ranges": "198.18.100.0/24\n198.18.101.9-198.18.101.1"}, `ranges line 2 "198.18.101.9-198.18.101.1"`},
		{"mixed families", map[string]string{"ranges": "198.18.100.0/24\n198.18.101.1-2001:db8::1"}, `ranges line 2`},
		{"overlapping ranges", map[string]string{"ranges": "198.18.100.0/24\n198.18.100.128/25"}, `ranges line 2 "198.18.100.128/25" overlaps line 1 "198.18.100.0/24"`},
		{"a range holding the nodes' own addresses", map[string]string{"ranges": "198.18.100.0/24\n198.18.0.0/24"},
			fmt.Sprintf(`contains %s, the address of node %q`, n1.IPv4, n1.Name)},
		{"an IPv6 range holding the nodes' own addresses", map[string]string{"ranges": "198.18.100.0/24\n2001:db8::/120"},
			fmt.Sprintf(`contains %s, the address of node %q`, n1.IPv6, n1.Name)},
		{"a range of loopback addresses", map[string]string{"ranges": "198.18.100.0/24\n127.0.0.0/30"}, `ranges line 2 "127.0.0.0/30"`},
		{"a bad range option", map[string]string{"ranges": "198.18.100.0/24 netmask=40"}, `ranges line 1`},
	})
}

// refusesEach applies each bad edit in turn on top of the default
// configuration and checks that it is refused everywhere, said so, and that
// the addresses do not change.
func (e *env) refusesEach(cases []badConfig) {
	e.t.Helper()
	ips := serviceIPs(150, 3)
	e.service("web", ips...)
	holders := e.servedAll(ips...)
	addrs := map[string][]netip.Prefix{}
	for _, n := range e.nodes {
		addrs[n] = e.testAddrs(n)
	}
	for _, c := range cases {
		cfg := defaultConfig()
		maps.Copy(cfg, c.set)
		mark := e.markLogs()
		edited := time.Now()
		e.setConfig(cfg)
		for _, n := range e.nodes {
			e.logged(mark, n, "invalid configuration; keeping the last good one", c.want)
		}
		msg := e.warningSince("ConfigMap", testenv.ConfigMap, "InvalidConfig", edited, c.want)
		for _, n := range e.nodes {
			e.eventually(n+" reports "+c.name+" in its heartbeat", func() (bool, string) {
				hb := e.heartbeat(n)
				return strings.Contains(hb[lease.AnnotationError], c.want), fmt.Sprint(hb[lease.AnnotationError])
			})
		}
		e.statusShows(c.want)
		for _, n := range e.nodes {
			now := e.testAddrs(n)
			assert.Check(e.t, slices.Equal(now, addrs[n]), "%s: %v, was %v", n, now, addrs[n])
		}
		for ip, h := range holders {
			assert.Equal(e.t, e.holder(ip), h)
		}
		e.t.Logf("%s: refused: %s", c.name, msg)
	}
	// A good edit clears the error everywhere.
	e.setConfig(defaultConfig())
	for _, n := range e.nodes {
		e.eventually(n+" reports no error", func() (bool, string) {
			hb := e.heartbeat(n)
			return hb != nil && hb[lease.AnnotationError] == "", fmt.Sprint(hb)
		})
	}
}

// statusShows checks that `kubectl eip status [args]` prints s, when the
// plugin was built (make build; KUBECTL_EIP_BIN).
func (e *env) statusShows(s string, args ...string) {
	e.t.Helper()
	bin := os.Getenv("KUBECTL_EIP_BIN")
	if bin == "" {
		return
	}
	if _, err := os.Stat(bin); err != nil {
		return
	}
	e.eventually("kubectl eip status shows "+s, func() (bool, string) {
		// A non-zero exit (the plugin reports problems that way) still
		// prints the table.
		out, err := e.c.Exec(e.ctx, testenv.Client, append([]string{bin, "--kubeconfig=" + e.c.AdminKubeconfig(), "-n", testenv.Namespace, "status"}, args...)...)
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			return false, err.Error()
		}
		return strings.Contains(string(out), s), fmt.Sprintf("%s%v", out, err)
	})
}

// Unknown keys are warned about, once each, and otherwise ignored: the rest
// of the edit applies.
func TestBadConfigUnknownKeyIsWarned(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	ip := testenv.ServiceIP(153)
	e.service("web", ip)
	holder := e.served(ip)
	cfg := defaultConfig()
	cfg["lease-durtion"] = "5s"
	cfg["netmask"] = "24"
	mark := e.markLogs()
	edited := time.Now()
	e.setConfig(cfg)
	msg := e.warningSince("ConfigMap", testenv.ConfigMap, "ConfigWarning", edited, `unknown key "lease-durtion" ignored`)
	assert.Assert(t, strings.Contains(msg, "lease-duration"), "a suggestion: %s", msg)
	for _, n := range e.nodes {
		e.logged(mark, n, "configuration warning", "lease-durtion")
	}
	e.eventually("the rest of the edit applies", func() (bool, string) {
		a := e.testAddrs(holder)
		return len(a) == 1 && a[0] == netip.PrefixFrom(ip, 24), fmt.Sprint(a)
	})
	for _, n := range e.nodes {
		assert.Equal(t, e.heartbeat(n)[lease.AnnotationError], "", n)
	}
}

// An interface that exists on some nodes only: the node without it says
// so (log, Warning event, heartbeat eip.io/eligible=false and eip.io/error)
// and stays out; the others serve. Creating the interface there brings
// the node back.
func TestBadConfigInterfaceMissingOnOneNode(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	lacking := e.nodes[len(e.nodes)-1]
	for _, n := range e.nodes[:len(e.nodes)-1] {
		e.addDummy(n, "eip0")
	}
	ips := serviceIPs(155, 4)
	e.service("web", ips...)
	e.servedAll(ips...)

	cfg := defaultConfig()
	cfg["iface"] = "eip0"
	mark := e.markLogs()
	edited := time.Now()
	e.setConfig(cfg)
	const want = `interface "eip0"`
	e.logged(mark, lacking, "not eligible", want)
	msg := e.warningSince("ConfigMap", testenv.ConfigMap, "InterfaceMissing", edited, lacking, want)
	t.Logf("event: %s", msg)
	e.eventually(lacking+" reports it", func() (bool, string) {
		hb := e.heartbeat(lacking)
		return hb[lease.AnnotationEligible] == "false" && strings.Contains(hb[lease.AnnotationError], want), fmt.Sprint(hb)
	})
	e.statusShows(want)
	for _, ip := range ips {
		var h string
		e.eventually(ip.String()+" bound by a node that has eip0, and only there", func() (bool, string) {
			h = e.holder(ip)
			on := e.boundOn(ip)
			return h != "" && h != lacking && slices.Equal(on, []string{h}), fmt.Sprintf("holder %s, bound on %v", h, on)
		})
		e.logged(mark, h, "msg=bound", "ip="+ip.String()+" ", "iface=eip0")
	}
	e.throughout(lacking+" stays out", 2*leaseDuration, func() string {
		if hb := e.heartbeat(lacking); hb[lease.AnnotationEligible] != "false" {
			return fmt.Sprint(hb)
		}
		if a := e.testAddrs(lacking); len(a) > 0 {
			return fmt.Sprint(a)
		}
		for _, ip := range ips {
			if h := e.holder(ip); h == lacking {
				return ip.String() + " held by " + lacking
			}
		}
		return ""
	})

	mark = e.markLogs()
	e.addDummy(lacking, "eip0")
	e.logged(mark, lacking, "eligible")
	e.eventually(lacking+" eligible again", func() (bool, string) {
		hb := e.heartbeat(lacking)
		return hb[lease.AnnotationEligible] == "true" && hb[lease.AnnotationError] == "", fmt.Sprint(hb)
	})
}

// addDummy creates an interface with carrier on node (newEnv deletes eip0).
func (e *env) addDummy(node, name string) {
	e.t.Helper()
	_, err := e.c.Exec(e.ctx, node, "sh", "-c", "ip link add "+name+" type veth peer name "+name+"p && ip link set "+name+"p up && ip link set "+name+" up")
	e.must(err)
}

// Services that name addresses eip must not bind: each is refused with an
// AddressRejected event on the Service naming the reason, never bound and
// never locked, while the Service's good address is served.
func TestBadServiceAddressesAreRejected(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	n1, err := e.c.Node(e.nodes[0])
	assert.NilError(t, err)
	good := testenv.ServiceIP(160)
	bad := []struct {
		ip     string
		reason string
	}{
		{"198.18.50.5", "outside every configured range"},
		{"198.18.100.0", `the network address of range "198.18.100.0/24"`},
		{"198.18.100.255", `the broadcast address of range "198.18.100.0/24"`},
		{n1.IPv4.String(), fmt.Sprintf("the address of node %q", n1.Name)},
		{n1.IPv6.String(), fmt.Sprintf("the address of node %q", n1.Name)},
	}
	ips := []netip.Addr{good}
	for _, b := range bad {
		ips = append(ips, netip.MustParseAddr(b.ip))
	}
	created := time.Now()
	e.service("mixed", ips...)
	assert.Equal(t, e.served(good), e.holder(good))
	for _, b := range bad {
		msg := e.warningSince("Service", "mixed", "AddressRejected", created, b.ip+" ", b.reason)
		t.Logf("%s: %s", b.ip, msg)
	}
	e.neverBound("mixed", ips[1:])
}

// The API server refuses some forms outright: the same IP twice in one
// Service and IPv4-mapped IPv6 addresses. eip never sees them; if an older
// API server let them through, internal/ipset refuses mapped forms (unit
// tested) and a repeated IP is one IP.
func TestBadServiceFormsTheAPIServerRefuses(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	for name, ips := range map[string][]string{
		"dup":    {testenv.ServiceIP(162).String(), testenv.ServiceIP(162).String()},
		"mapped": {"::ffff:" + testenv.ServiceIP(163).String()},
	} {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: svcNamespace, Labels: map[string]string{e2eLabel: "true"}},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}, ExternalIPs: ips},
		}
		_, err := e.k.CoreV1().Services(svcNamespace).Create(e.ctx, svc, metav1.CreateOptions{})
		if err == nil {
			// Accepted: then eip must still bind each address at most once
			// and the mapped form never.
			t.Logf("the API server accepted %s %v", name, ips)
			if name == "dup" {
				e.served(testenv.ServiceIP(162))
			} else {
				e.warningSince("Service", name, "AddressRejected", time.Now().Add(-time.Minute), "IPv4-mapped")
				e.neverBound(name, []netip.Addr{netip.MustParseAddr(ips[0]).Unmap()})
			}
			continue
		}
		assert.Assert(t, apierrors.IsInvalid(err), "%s: %v", name, err)
		t.Logf("the API server refuses %s %v: %v", name, ips, err)
	}
}

// neverBound watches for two lease durations that none of ips is bound on
// any node or locked.
func (e *env) neverBound(svc string, ips []netip.Addr) {
	e.t.Helper()
	e.throughout(svc+": rejected addresses never bound", 2*leaseDuration, func() string {
		for _, n := range e.nodes {
			all, err := e.c.NodeAddrs(n)
			if err != nil {
				return err.Error()
			}
			own, _ := e.c.Node(n)
			for _, p := range all {
				for _, ip := range ips {
					if p.Addr() == ip && ip != own.IPv4 && ip != own.IPv6 {
						return fmt.Sprintf("%s bound on %s", ip, n)
					}
				}
			}
		}
		for _, ip := range ips {
			if l := e.lock(ip); l != nil {
				return fmt.Sprintf("%s has a lock held by %v", ip, l.Spec.HolderIdentity)
			}
		}
		return ""
	})
}
