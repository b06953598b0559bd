package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	"gotest.tools/v3/golden"
	"gotest.tools/v3/poll"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/eip-project/eip/internal/lease"
)

func TestStatusGolden(t *testing.T) {
	for _, tc := range []struct {
		golden string
		args   []string
	}{
		{"status.golden", []string{"status"}},
		{"status-wide.golden", []string{"status", "-o", "wide"}},
		{"status-json.golden", []string{"status", "-o", "json"}},
		{"status-yaml.golden", []string{"status", "-o", "yaml"}},
		{"status-filtered.golden", []string{"status", "2001:db8::100:1", "198.18.100.1"}},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			h := newHarness(t, fixture()...)
			out, err := h.run(context.Background(), tc.args...)
			assert.NilError(t, err)
			golden.Assert(t, out, tc.golden)
		})
	}
}

func TestStatusConfigProblems(t *testing.T) {
	objs := fixture()
	h := newHarness(t, objs[1:]...) // no ConfigMap
	out, err := h.run(context.Background(), "status")
	assert.NilError(t, err)
	golden.Assert(t, out, "status-no-configmap.golden")

	cm := fixture()[0]
	h = newHarness(t, append(objs[1:], cm)...)
	_, err = h.client.CoreV1().ConfigMaps(ns).Update(context.Background(), withData(cm, map[string]string{
		"ranges": "198.18.100.0/24\n198.18.0.0/24", "policy": "random", "iface": "eth0", "colour": "blue",
	}), metav1.UpdateOptions{})
	assert.NilError(t, err)
	out, err = h.run(context.Background(), "status")
	assert.NilError(t, err)
	golden.Assert(t, out, "status-invalid-configmap.golden")
}

// Every field of the schema is present, so that scripts need no defaults.
func TestStatusJSONSchema(t *testing.T) {
	h := newHarness(t, fixture()...)
	out, err := h.run(context.Background(), "status", "-o", "json")
	assert.NilError(t, err)
	var doc map[string]any
	assert.NilError(t, json.Unmarshal([]byte(out), &doc))
	assert.Equal(t, doc["schemaVersion"], float64(SchemaVersion))
	keys := func(m any) []string {
		return slices.Sorted(maps.Keys(m.(map[string]any)))
	}
	assert.DeepEqual(t, keys(doc), []string{"config", "ips", "namespace", "nodes", "observedAt", "schemaVersion", "warnings"})
	assert.DeepEqual(t, keys(doc["config"]), []string{"error", "found", "name", "policy", "ranges", "warnings"})
	for _, ip := range doc["ips"].([]any) {
		assert.DeepEqual(t, keys(ip), []string{"announce", "claimedBy", "conflictMAC", "holder", "holderAlive", "interface", "ip", "lastMoveTime", "lock",
			"moveTo", "moves", "prefixLength", "range", "reason", "services", "state", "successor", "wire"})
		assert.DeepEqual(t, keys(ip.(map[string]any)["wire"]), []string{"by", "checkedAt", "deaf", "macs", "since", "verdict"})
	}
	for _, n := range doc["nodes"].([]any) {
		assert.DeepEqual(t, keys(n), []string{"alive", "bgpSessions", "bound", "eligible", "error", "holds", "lastRenewTime",
			"leaseDurationSeconds", "macs", "name", "reason"})
	}
}

func TestStatusArguments(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"status", "-o", "xml"}, `unknown output format "xml": use wide, json or yaml`},
		{[]string{"status", "198.18.100"}, `"198.18.100" is not an IP address`},
		{[]string{"status", "fe80::1%eth0"}, `"fe80::1%eth0" is not an IP address`},
		{[]string{"status", "198.18.100.77"}, "198.18.100.77 is not managed by eip: no Service names it and it has no lock"},
		{[]string{"status", "--no-such-flag"}, "unknown flag: --no-such-flag"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			h := newHarness(t, fixture()...)
			_, err := h.run(context.Background(), tc.args...)
			assert.Error(t, err, tc.want)
		})
	}
}

// An unmanaged IP among managed ones: the managed rows print, the command
// fails.
func TestStatusSomeUnmanaged(t *testing.T) {
	h := newHarness(t, fixture()...)
	out, err := h.run(context.Background(), "status", "198.18.100.1", "198.18.100.77")
	assert.Error(t, err, "198.18.100.77 is not managed by eip: no Service names it and it has no lock")
	assert.Assert(t, strings.HasPrefix(out, "IP ") && strings.Contains(out, "198.18.100.1 "), out)
}

// The real client comes from the kubeconfig flags.
func TestKubeconfigError(t *testing.T) {
	var out, errOut bytes.Buffer
	cmd := NewCommand(genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &errOut}, "v1")
	cmd.SetArgs([]string{"status", "--kubeconfig", "/nonexistent/kubeconfig"})
	assert.Error(t, cmd.Execute(), "load kubeconfig: stat /nonexistent/kubeconfig: no such file or directory")
	assert.Equal(t, out.String()+errOut.String(), "")
}

func TestVersion(t *testing.T) {
	h := newHarness(t)
	out, err := h.run(context.Background(), "--version")
	assert.NilError(t, err)
	assert.Equal(t, out, "kubectl-eip v1.2.3\n")
}

// The namespace is eip's, not the kubeconfig context's, unless -n says.
func TestNamespace(t *testing.T) {
	h := newHarness(t)
	assert.Equal(t, h.env.eipNamespace(), DefaultNamespace)
	_, _ = h.run(context.Background(), "status", "-n", "other")
	assert.Equal(t, h.env.eipNamespace(), "other")
	for _, a := range h.client.Actions() {
		if a.GetResource().Resource == "leases" {
			assert.Equal(t, a.GetNamespace(), "other")
		}
	}
}

// status reads with one request per kind, however many IPs there are.
func TestStatusRequests(t *testing.T) {
	h := newHarness(t, fixture()...)
	_, err := h.run(context.Background(), "status")
	assert.NilError(t, err)
	var got []string
	for _, a := range h.client.Actions() {
		got = append(got, a.GetVerb()+" "+a.GetResource().Resource)
	}
	slices.Sort(got) // sent at once, in any order
	assert.DeepEqual(t, got, []string{"get configmaps", "list endpointslices", "list leases", "list nodes", "list services"})
}

// The kubernetes Service's endpoints are the API server's addresses, as
// the daemons see them: a Service naming one is refused, and a range
// holding one makes the ConfigMap invalid.
func TestStatusAPIServerEndpointIsRefused(t *testing.T) {
	eps := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: "kubernetes", Labels: map[string]string{discoveryv1.LabelServiceName: "kubernetes"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"198.18.100.4"}}},
	}
	h := newHarness(t, append(fixture(), eps)...)
	out, err := h.run(context.Background(), "status", "-o", "json", "198.18.100.4")
	assert.NilError(t, err)
	var st Status
	assert.NilError(t, json.Unmarshal([]byte(out), &st))
	assert.Assert(t, strings.Contains(st.Config.Error, `contains 198.18.100.4, an address of the API server`), st.Config.Error)
	assert.Equal(t, len(st.IPs), 1)
	assert.Equal(t, st.IPs[0].State, StateRefused)
	assert.Equal(t, st.IPs[0].Reason, "an address of the API server")
}

// A Service naming another namespace's address, or one of a range kept for
// other namespaces, is refused as the daemons refuse it: the served row
// keeps its state and names the refused Service, an address nobody may
// have is refused.
func TestStatusAcrossNamespaces(t *testing.T) {
	objs := fixture()
	cm := objs[0].(*corev1.ConfigMap)
	cm.Data["ranges"] = "198.18.100.0/24 namespaces=default,shop\n2001:db8::100:0/112 iface=eth1"
	objs = append(objs, externalIPs("tenant", "steal", "198.18.100.3", "198.18.100.7"),
		externalIPs("tenant", "v6", "2001:db8::100:1"))
	h := newHarness(t, objs...)
	out, err := h.run(context.Background(), "status", "-o", "json", "198.18.100.3", "198.18.100.7", "2001:db8::100:1")
	assert.NilError(t, err)
	var st Status
	assert.NilError(t, json.Unmarshal([]byte(out), &st))
	assert.Equal(t, len(st.IPs), 3)
	const outside = "range \"198.18.100.0/24 namespaces=default,shop\" is only for namespaces default, shop, not tenant"
	taken, refused, shared := st.IPs[0], st.IPs[1], st.IPs[2]
	assert.DeepEqual(t, taken.Services, []string{"shop/front"})
	assert.Equal(t, taken.State, StateUnbound)
	assert.Equal(t, taken.Reason, "holder node-4 is not alive; live nodes take it over; refused for tenant/steal: "+outside)
	assert.DeepEqual(t, refused.Services, []string{"tenant/steal"})
	assert.Equal(t, refused.State, StateRefused)
	assert.Equal(t, refused.Reason, outside)
	assert.DeepEqual(t, shared.Services, []string{"default/api"})
	assert.Equal(t, shared.State, StateBound)
	assert.Equal(t, shared.Reason, "refused for tenant/v6: held for default/api, of another namespace (Services of different namespaces share an address only when both carry annotation eip.io/sharing-key with the same value)")
}

// Status agrees with the daemons on who owns an address: the Service its
// lock records, while it names the address, before an older one (here,
// created in the same second, first by name) of another namespace.
func TestStatusRecordedOwner(t *testing.T) {
	objs := fixture()
	for i, o := range objs {
		if l, ok := o.(*coordinationv1.Lease); ok && l.Name == lease.NameFor(netip.MustParseAddr("198.18.100.1")) {
			objs[i] = lease.WithOwner(l, "default/web", "")
		}
	}
	objs = append(objs, externalIPs("a-team", "steal", "198.18.100.1"))
	h := newHarness(t, objs...)
	out, err := h.run(context.Background(), "status", "-o", "json", "198.18.100.1")
	assert.NilError(t, err)
	var st Status
	assert.NilError(t, json.Unmarshal([]byte(out), &st))
	assert.Equal(t, len(st.IPs), 1)
	assert.DeepEqual(t, st.IPs[0].Services, []string{"default/web"})
	assert.Equal(t, st.IPs[0].State, StateBound)
	assert.Assert(t, strings.Contains(st.IPs[0].Reason, "refused for a-team/steal: held for default/web, of another namespace"), st.IPs[0].Reason)
}

func TestStatusWatch(t *testing.T) {
	h := newHarness(t, fixture()...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := h.run(ctx, "status", "--watch", "198.18.100.1")
		done <- err
	}()
	waitFor(t, func() bool { return tables(h.out.String()) == 1 })

	// A renewal alone prints nothing; a move prints again.
	leases := h.client.CoordinationV1().Leases(ns)
	hb, err := leases.Get(ctx, lease.HeartbeatName("node-1"), metav1.GetOptions{})
	assert.NilError(t, err)
	hb.Spec.RenewTime = &metav1.MicroTime{Time: now}
	_, err = leases.Update(ctx, hb, metav1.UpdateOptions{})
	assert.NilError(t, err)
	l, err := leases.Get(ctx, "eip-198-18-100-1", metav1.GetOptions{})
	assert.NilError(t, err)
	_, err = leases.Update(ctx, lease.WithHolder(l, mustAddr("198.18.100.1"), "node-2", "", []string{"default/web"}, now), metav1.UpdateOptions{})
	assert.NilError(t, err)
	waitFor(t, func() bool { return tables(h.out.String()) == 2 })

	// Nothing is written when a holder dies: time passing tells.
	h.clock.Step(3 * time.Second)
	waitFor(t, func() bool { return tables(h.out.String()) == 3 })
	cancel()
	assert.NilError(t, <-done)
	golden.Assert(t, h.out.String(), "status-watch.golden")
}

func withData(obj runtime.Object, data map[string]string) *corev1.ConfigMap {
	cm := obj.(*corev1.ConfigMap).DeepCopy()
	cm.Data = data
	return cm
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

// tables counts the IP tables in out.
func tables(out string) int { return strings.Count("\n"+out, "\nIP ") }

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	poll.WaitOn(t, func(poll.LogT) poll.Result {
		if cond() {
			return poll.Success()
		}
		return poll.Continue("waiting")
	}, poll.WithTimeout(10*time.Second), poll.WithDelay(time.Millisecond))
}

// Route mode: the IP table says how each IP is announced, and a table of
// BGP sessions follows the nodes.
func TestStatusRouteMode(t *testing.T) {
	up := now.Add(-90 * time.Second)
	hb := func(node string, sessions ...lease.BGPSession) *coordinationv1.Lease {
		l := lease.RenewedHeartbeat(nil, ns, node, 2*time.Second,
			lease.HeartbeatStatus{Eligible: true, Held: 1, BGP: lease.FormatBGPSessions(sessions)}, now.Add(-200*time.Millisecond))
		l.ResourceVersion = "10"
		return l
	}
	h := newHarness(t,
		&corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: DefaultConfigMap, Namespace: ns},
			Data: map[string]string{
				"ranges":    "198.18.100.0/24\n198.19.100.0/24 announce=bgp\n198.19.101.0/24 announce=both iface=eth0",
				"bgp-asn":   "64512",
				"bgp-peers": "198.18.0.3 asn=64500\n198.18.0.4 asn=64500",
			},
		},
		node("node-1", "198.18.0.11"), node("node-2", "198.18.0.12"),
		hb("node-1", lease.BGPSession{Peer: "198.18.0.3", State: "established", Since: &up}, lease.BGPSession{Peer: "198.18.0.4", State: "active"}),
		hb("node-2", lease.BGPSession{Peer: "198.18.0.3", State: "established", Since: &up}, lease.BGPSession{Peer: "198.18.0.4", State: "active"}),
		externalIPs("default", "web", "198.18.100.1", "198.19.100.1", "198.19.101.1"),
		lock("198.18.100.1", "node-1", 0, now.Add(-time.Minute), "default/web"),
		lock("198.19.100.1", "node-2", 4, now.Add(-time.Minute), "default/web"),
		lock("198.19.101.1", "node-1", 1, now.Add(-time.Minute), "default/web"),
	)
	out, err := h.run(context.Background(), "status")
	assert.NilError(t, err)
	golden.Assert(t, out, "status-route-mode.golden")
}
