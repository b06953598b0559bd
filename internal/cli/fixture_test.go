package cli

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/eip-project/eip/internal/ipset"
	"github.com/eip-project/eip/internal/lease"
	"github.com/eip-project/eip/internal/wire"
)

// now is the fixed time of every test; ages in golden files are relative to it.
var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const ns = DefaultNamespace

// fixture is a cluster that shows every state:
//
//	198.18.100.1     default/web            node-1, bound, also claimed by a LAN host, both heard by node-2
//	198.18.100.2     default/api,web        node-2, bound, moved 3 times, answered as node-1 hears
//	198.18.100.3     shop/front             node-4, whose heartbeat is stale
//	198.18.100.4     shop/back              no lock yet
//	198.18.100.5     default/batch          node-1, move to node-2 pending
//	198.18.100.6     default/printer        node-2, conflict: a LAN host answers for it
//	198.18.100.9     (none)                 node-2: orphan
//	198.18.100.0     default/net            network address of the range
//	198.18.0.11      default/node-ip        node-1's own address
//	198.18.200.1     default/outside        outside every range
//	2001:db8::100:1  default/api            node-1, interface eth1, unanswered as node-2 hears
//
// and a damaged lock named for 198.18.100.8. Nodes: node-1 and node-2 live
// and eligible, node-3 live but cordoned, node-4 dead, node-5 live but its
// daemon reports an error, node-6 without daemon, node-7 live but excluded.
func fixture() []runtime.Object {
	objs := []runtime.Object{
		&corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: DefaultConfigMap, Namespace: ns},
			Data: map[string]string{
				"netmask": "24",
				"ranges":  "198.18.100.0/24\n2001:db8::100:0/112 iface=eth1",
			},
		},
		node("node-1", "198.18.0.11"), node("node-2", "198.18.0.12"), node("node-3", "198.18.0.13"),
		node("node-4", "198.18.0.14"), node("node-5", "198.18.0.15"), node("node-6", "198.18.0.16"),
		node("node-7", "198.18.0.17"),
		heartbeat("node-1", now.Add(-300*time.Millisecond), true, "", 3),
		heartbeat("node-2", now.Add(-100*time.Millisecond), true, "", 1),
		heartbeat("node-3", now.Add(-200*time.Millisecond), true, "", 0),
		heartbeat("node-4", now.Add(-95*time.Second), true, "", 1),
		heartbeat("node-5", now.Add(-400*time.Millisecond), false, "interface eth1: link not found", 0),
		heartbeat("node-7", now.Add(-250*time.Millisecond), true, "", 0),
		externalIPs("default", "web", "198.18.100.1", "198.18.100.2"),
		loadBalancer("default", "api", "198.18.100.2", "2001:db8::100:1"),
		externalIPs("shop", "front", "198.18.100.3"),
		externalIPs("shop", "back", "198.18.100.4"),
		externalIPs("default", "batch", "198.18.100.5"),
		externalIPs("default", "net", "198.18.100.0"),
		externalIPs("default", "node-ip", "198.18.0.11"),
		externalIPs("default", "outside", "198.18.200.1"),
		externalIPs("default", "printer", "198.18.100.6"),
		lease.WithSuccessor(lock("198.18.100.1", "node-1", 1, now.Add(-5*time.Minute), "default/web"), "node-2"),
		lease.WithSuccessor(lock("198.18.100.2", "node-2", 3, now.Add(-2*time.Hour), "default/api", "default/web"), "node-1"),
		lock("198.18.100.3", "node-4", 0, now.Add(-26*time.Hour), "shop/front"),
		withMoveTo(lock("198.18.100.5", "node-1", 2, now.Add(-40*time.Second), "default/batch"), "node-2"),
		lock("198.18.100.9", "node-2", 1, now.Add(-3*time.Minute)),
		lock("198.18.100.6", "node-2", 0, now.Add(-time.Minute), "default/printer"),
		lease.WithSuccessor(lock("2001:db8::100:1", "node-1", 0, now.Add(-10*time.Minute), "default/api"), "node-2"),
	}
	damaged := lock("198.18.100.8", "node-3", 0, now.Add(-time.Hour))
	damaged.Annotations[lease.AnnotationIP] = "garbage"
	objs = append(objs, damaged)
	cordoned := objs[3].(*corev1.Node)
	cordoned.Spec.Unschedulable = true
	excluded := objs[7].(*corev1.Node)
	excluded.Labels = map[string]string{"node.kubernetes.io/exclude-from-external-load-balancers": ""}
	return objs
}

func node(name, ip string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Status:     corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}},
	}
}

// heartbeat is node's heartbeat; its MAC is 02:00:00:00:00 and the last
// digit of its name. node-2 does not bind 198.18.100.6, which a LAN host
// answers for, and a LAN host claims 198.18.100.1, which node-1 binds.
func heartbeat(node string, renewed time.Time, eligible bool, errText string, held int) *coordinationv1.Lease {
	st := lease.HeartbeatStatus{Eligible: eligible, Error: errText, Held: held,
		MACs: lease.FormatMACs([]net.HardwareAddr{{2, 0, 0, 0, 0, node[len(node)-1] - '0'}})}
	switch node {
	case "node-1":
		st.Claims = lease.FormatAnswers(map[netip.Addr]string{netip.MustParseAddr("198.18.100.1"): "02:ee:00:00:00:02"})
		st.WireChecked = now.Add(-4 * time.Second)
	case "node-2":
		st.Conflicts = lease.FormatAnswers(map[netip.Addr]string{netip.MustParseAddr("198.18.100.6"): "02:ee:00:00:00:01"})
		st.Wire = wire.Report{Heard: true, Entries: map[netip.Addr]wire.Entry{
			netip.MustParseAddr("198.18.100.1"):    {Verdict: wire.TwoMACs, MACs: []string{"02:00:00:00:00:01", "02:ee:00:00:00:02"}, Since: now.Add(-20 * time.Second)},
			netip.MustParseAddr("2001:db8::100:1"): {Verdict: wire.NoAnswer, Since: now.Add(-12 * time.Second)},
		}}.Format()
		st.WireChecked = now.Add(-3 * time.Second)
	}
	l := lease.RenewedHeartbeat(nil, ns, node, 2*time.Second, st, renewed)
	l.ResourceVersion = "10"
	return l
}

func lock(ip, holder string, moves int32, movedAt time.Time, services ...string) *coordinationv1.Lease {
	l := lease.NewLockLease(ns, netip.MustParseAddr(ip), holder, "", services, movedAt)
	l.Spec.LeaseTransitions = &moves
	l.ResourceVersion = "20"
	return l
}

func withMoveTo(l *coordinationv1.Lease, node string) *coordinationv1.Lease {
	return lease.WithMoveTo(l, node)
}

func externalIPs(namespace, name string, ips ...string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ExternalIPs: ips},
	}
}

func loadBalancer(namespace, name string, ips ...string) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer},
	}
	for _, ip := range ips {
		svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
	}
	return svc
}

// harness runs commands against a fake clientset and a fake clock.
type harness struct {
	t      *testing.T
	client *fake.Clientset
	clock  *clocktesting.FakeClock
	out    *syncBuffer
	errOut *syncBuffer
	env    *env
}

func newHarness(t *testing.T, objs ...runtime.Object) *harness {
	t.Helper()
	h := &harness{
		t:      t,
		client: fake.NewClientset(objs...),
		clock:  clocktesting.NewFakeClock(now),
		out:    &syncBuffer{},
		errOut: &syncBuffer{},
	}
	strictLeases(h.client)
	h.env = &env{
		IOStreams: genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: h.out, ErrOut: h.errOut},
		flags:     genericclioptions.NewConfigFlags(false),
		configMap: DefaultConfigMap,
		clock:     h.clock,
		newClient: func() (kubernetes.Interface, error) { return h.client, nil },
		lists:     func(c kubernetes.Interface) lists { return typedLists{c} },
	}
	return h
}

// typedLists lists through the fake clientset, which cannot stream.
type typedLists struct{ c kubernetes.Interface }

func (t typedLists) leases(ctx context.Context, namespace string, opts metav1.ListOptions) ([]*coordinationv1.Lease, map[netip.Addr]*lease.Lock, error) {
	l, err := t.c.CoordinationV1().Leases(namespace).List(ctx, opts)
	if err != nil {
		return nil, nil, err
	}
	return pointers(l.Items), nil, nil
}

func (t typedLists) services(ctx context.Context, opts metav1.ListOptions) ([]*corev1.Service, []ipset.Claim, error) {
	l, err := t.c.CoreV1().Services(metav1.NamespaceAll).List(ctx, opts)
	if err != nil {
		return nil, nil, err
	}
	return pointers(l.Items), nil, nil
}

func pointers[T any](items []T) []*T {
	out := make([]*T, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}

// run runs kubectl-eip with args and returns what it printed.
func (h *harness) run(ctx context.Context, args ...string) (string, error) {
	cmd := newRootCommand(h.env, "v1.2.3")
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	return h.out.String(), err
}

// strictLeases makes the fake clientset treat Lease updates as the API
// server does: the resourceVersion is a precondition, and every write
// gives the Lease a new one.
func strictLeases(c *fake.Clientset) {
	var mu sync.Mutex
	next := 1000
	c.PrependReactor("update", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		l := a.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease).DeepCopy()
		gvr := coordinationv1.SchemeGroupVersion.WithResource("leases")
		cur, err := c.Tracker().Get(gvr, l.Namespace, l.Name)
		if err != nil {
			return true, nil, err
		}
		if rv := cur.(*coordinationv1.Lease).ResourceVersion; l.ResourceVersion != rv {
			return true, nil, apierrors.NewConflict(gvr.GroupResource(), l.Name, errConflict(l.ResourceVersion, rv))
		}
		next++
		l.ResourceVersion = strconv.Itoa(next)
		return true, l, c.Tracker().Update(gvr, l, l.Namespace)
	})
}

type conflictError struct{ have, want string }

func errConflict(have, want string) error { return conflictError{have, want} }

func (e conflictError) Error() string {
	return "resourceVersion " + e.have + " is not the current " + e.want
}

// syncBuffer is a bytes.Buffer that a test may read while a command writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
