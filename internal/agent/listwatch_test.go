package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"gotest.tools/v3/assert"
	"gotest.tools/v3/poll"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/eip-project/eip/internal/ipset"
	"github.com/eip-project/eip/internal/lease"
)

// refused is what a list or watch returns while nothing listens on the API
// server's port.
var refused = &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}

// failing lists and watches fail with errs in turn, then succeed.
func failing(errs ...error) (*cache.ListWatch, *int) {
	calls := 0
	next := func() error {
		calls++
		if calls <= len(errs) {
			return errs[calls-1]
		}
		return nil
	}
	return &cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			if err := next(); err != nil {
				return nil, err
			}
			return &corev1.ServiceList{}, nil
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
			if err := next(); err != nil {
				return nil, err
			}
			return watch.NewFake(), nil
		},
	}, &calls
}

func TestPatientRetriesAnUnreachableAPIServer(t *testing.T) {
	lw, calls := failing(refused, errors.New("http2: client connection lost"), refused)
	p := patient{lw: lw, every: time.Millisecond, clk: clock.RealClock{}}
	w, err := p.WatchWithContext(context.Background(), metav1.ListOptions{})
	assert.NilError(t, err)
	w.Stop()
	assert.Equal(t, *calls, 4)
}

func TestPatientPassesAPIErrorsOn(t *testing.T) {
	gone := apierrors.NewResourceExpired("too old resource version")
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "leases"}, "", errors.New("no"))
	for _, want := range []error{gone, forbidden} {
		lw, calls := failing(want)
		p := patient{lw: lw, every: apiRetry, clk: clocktesting.NewFakeClock(time.Unix(0, 0))}
		_, err := p.ListWithContext(context.Background(), metav1.ListOptions{})
		assert.Equal(t, err, want)
		assert.Equal(t, *calls, 1)
	}
}

func TestPatientStopsWithItsContext(t *testing.T) {
	lw, _ := failing(refused, refused, refused)
	p := patient{lw: lw, every: apiRetry, clk: clocktesting.NewFakeClock(time.Unix(0, 0))}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := p.ListWithContext(ctx, metav1.ListOptions{})
	assert.ErrorIs(t, err, syscall.ECONNREFUSED)
}

// The caches keep what eipd reads and drop what it never does.
func TestKeepWhatIsRead(t *testing.T) {
	mf := []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-1", Labels: map[string]string{"a": "b"}, ManagedFields: mf},
		Spec:       corev1.NodeSpec{Unschedulable: true},
		Status: corev1.NodeStatus{
			Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "198.18.0.11"}},
			Images:     []corev1.ContainerImage{{Names: []string{"big"}}},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady}},
		},
	}
	keep := newInterner().keepWhatIsRead
	got, err := keep(n)
	assert.NilError(t, err)
	assert.DeepEqual(t, got, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-1", Labels: map[string]string{"a": "b"}},
		Spec:       corev1.NodeSpec{Unschedulable: true},
		Status:     corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "198.18.0.11"}}},
	})
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "eip-node-node-1", ManagedFields: mf, Labels: map[string]string{lease.RoleLabel: lease.RoleHeartbeat}}}
	got, err = keep(l.DeepCopy())
	assert.NilError(t, err)
	want := l.DeepCopy()
	want.ManagedFields = nil
	assert.DeepEqual(t, got, want)
	family := corev1.IPFamilyPolicySingleStack
	class := "eip.io/eip"
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name: "web", Namespace: "shop", UID: "u1", ResourceVersion: "7", ManagedFields: mf,
			Labels: map[string]string{"app": "web"},
			Annotations: map[string]string{
				"kubectl.kubernetes.io/last-applied-configuration": "{…}",
				"eip.io/sharing-key": "k", "eip.io/preferred-nodes": "node-2",
			},
			Finalizers: []string{"service.kubernetes.io/load-balancer-cleanup"},
		},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &class,
			Ports:     []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolUDP, Port: 80, NodePort: 30080}},
			Selector:  map[string]string{"app": "web"},
			ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"},
			ExternalIPs: []string{"198.18.1.1"}, LoadBalancerIP: "198.18.1.2",
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol}, IPFamilyPolicy: &family,
		},
		Status: corev1.ServiceStatus{
			LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "198.18.1.2"}}},
			Conditions:   []metav1.Condition{{Type: "Ready"}},
		},
	}
	got, err = keep(svc)
	assert.NilError(t, err)
	ours := ipset.LoadBalancerClass
	assert.DeepEqual(t, got, &ipset.Service{
		Name: "web", Namespace: "shop", UID: "u1", ResourceVersion: "7",
		Annotations: map[string]string{"eip.io/sharing-key": "k", "eip.io/preferred-nodes": "node-2"},
		Type:        corev1.ServiceTypeLoadBalancer, Class: &ours,
		Ports:       []ipset.Port{{Protocol: corev1.ProtocolUDP, Port: 80}},
		ExternalIPs: []string{"198.18.1.1"}, LoadBalancerIP: "198.18.1.2",
		Families: []corev1.IPFamily{corev1.IPv4Protocol}, FamilyPolicy: &family,
		Ingress: []corev1.LoadBalancerIngress{{IP: "198.18.1.2"}},
	})

	keys, err := indexersFor(l)[heartbeatIndex](l)
	assert.NilError(t, err)
	assert.DeepEqual(t, keys, []string{lease.RoleHeartbeat})
	lock := lease.NewLockLease("eip-system", netip.MustParseAddr("198.18.1.1"), "node-1", "", nil, time.Unix(0, 0))
	keys, err = indexersFor(lock)[heartbeatIndex](lock)
	assert.NilError(t, err)
	assert.Check(t, keys == nil)
}

// A lock in a cache is kept as a lease.Kept, which writes as the lock did
// less its UID; locks share their namespace and holder strings.
func TestKeepWhatIsReadKeepsLocksCompact(t *testing.T) {
	keep := newInterner().keepWhatIsRead
	var got []*lease.Kept
	for i, ip := range []string{"198.18.1.1", "198.18.1.2"} {
		// Each decoded object has its own copies, as protobuf gives them.
		l := lease.NewLockLease(strings.Clone("eip-system"), netip.MustParseAddr(ip), strings.Clone("node-1"), "", []string{"default/web"}, time.Unix(0, 0))
		l.UID = types.UID(fmt.Sprint("uid-", i))
		want := l.DeepCopy()
		want.UID = ""
		kept, err := keep(l)
		assert.NilError(t, err)
		k, ok := kept.(*lease.Kept)
		assert.Assert(t, ok, "%T", kept)
		assert.DeepEqual(t, k.Lease(), want)
		got = append(got, k)
	}
	same := func(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }
	assert.Check(t, same(got[0].Namespace, got[1].Namespace), "namespace shared")
	assert.Check(t, same(got[0].Holder, got[1].Holder), "holder shared")
	assert.Equal(t, got[1].IP, netip.MustParseAddr("198.18.1.2"))
}

// Services in a cache share their namespace, type, families, family
// policy, port protocols and ingress IP modes; each keeps its own values.
func TestKeepWhatIsReadSharesWhatServicesHaveAlike(t *testing.T) {
	keep := newInterner().keepWhatIsRead
	var got []*ipset.Service
	for i, ip := range []string{"198.18.1.1", "198.18.1.2"} {
		// Each decoded object has its own copies, as protobuf gives them.
		policy, mode := corev1.IPFamilyPolicySingleStack, corev1.LoadBalancerIPModeVIP
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("web-", i), Namespace: strings.Clone("shop")},
			Spec: corev1.ServiceSpec{
				Type:       corev1.ServiceType(strings.Clone(string(corev1.ServiceTypeLoadBalancer))),
				Ports:      []corev1.ServicePort{{Protocol: corev1.Protocol(strings.Clone("TCP")), Port: int32(80 + i)}},
				IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol}, IPFamilyPolicy: &policy,
			},
			Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: ip, IPMode: &mode}}}},
		}
		want := ipset.ServiceOf(svc.DeepCopy())
		kept, err := keep(svc)
		assert.NilError(t, err)
		assert.DeepEqual(t, kept, want)
		got = append(got, kept.(*ipset.Service))
	}
	same := func(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }
	assert.Check(t, same(got[0].Namespace, got[1].Namespace), "namespace shared")
	assert.Check(t, same(string(got[0].Type), string(got[1].Type)), "type shared")
	assert.Check(t, same(string(got[0].Ports[0].Protocol), string(got[1].Ports[0].Protocol)), "protocol shared")
	assert.Check(t, &got[0].Families[0] == &got[1].Families[0], "families shared")
	assert.Check(t, got[0].FamilyPolicy == got[1].FamilyPolicy, "family policy shared")
	assert.Check(t, got[0].Ingress[0].IPMode == got[1].Ingress[0].IPMode, "IP mode shared")
	assert.Equal(t, got[1].Ports[0].Port, int32(81))
	assert.Equal(t, got[1].Ingress[0].IP, "198.18.1.2")
}

// A real informer keeps a lock as a lease.Kept and a heartbeat as a
// Lease, by namespace and name, through adds, updates and deletions, and
// its handlers see what the cache keeps: the agent's lease handlers
// count a changed lock by name and a changed heartbeat as a change of
// everything.
func TestInformerKeepsLocksAsKept(t *testing.T) {
	ip := netip.MustParseAddr("198.18.1.1")
	lock := lease.NewLockLease(testNS, ip, "node-1", "node-2", []string{"default/web"}, time.Unix(0, 0))
	lock.ResourceVersion = "1"
	hb := lease.RenewedHeartbeat(nil, testNS, "node-1", 2*time.Second, lease.HeartbeatStatus{Eligible: true}, time.Unix(0, 0))
	hb.ResourceVersion = "2"
	// The reflector lists by a watch that sends the initial events, as
	// the API server does, and ends them with a bookmark.
	events := watch.NewFakeWithChanSize(8, false)
	events.Add(lock.DeepCopy())
	events.Add(hb.DeepCopy())
	events.Action(watch.Bookmark, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "2", Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}})
	lw := &cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			return &coordinationv1.LeaseList{ListMeta: metav1.ListMeta{ResourceVersion: "2"}, Items: []coordinationv1.Lease{*lock, *hb}}, nil
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) { return events, nil },
	}
	a := &Agent{clk: clock.RealClock{}, opt: Options{Namespace: testNS}, leaseKick: make(chan struct{}, 1)}
	a.news.changes = map[string]bool{}
	inf := a.patientInformer(lw, &coordinationv1.Lease{})
	reg, err := inf.AddEventHandler(a.leaseKicker())
	assert.NilError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go inf.RunWithContext(ctx)
	// The handlers run after the cache has the objects: wait for them too
	// (the race detector's slowness showed the gap).
	assert.Assert(t, cache.WaitForCacheSync(ctx.Done(), inf.HasSynced, reg.HasSynced))
	a.leaseIdx = inf.GetIndexer()

	k := a.lock(lease.NameFor(ip))
	assert.Assert(t, k != nil)
	assert.Equal(t, k.Holder, "node-1")
	assert.Equal(t, k.Successor, "node-2")
	assert.Equal(t, len(a.heartbeats()), 1)
	assert.Equal(t, len(a.allLocks()), 1)
	names, all, vouched := a.takeLeaseChanges()
	assert.Check(t, names[lease.NameFor(ip)])
	assert.Check(t, all, "a heartbeat changes everything")
	assert.DeepEqual(t, vouched, []string{"node-1"})

	moved := lease.WithHolder(lock, ip, "node-2", "", []string{"default/web"}, time.Unix(1, 0))
	moved.ResourceVersion = "3"
	events.Modify(moved)
	poll.WaitOn(t, func(poll.LogT) poll.Result {
		if k := a.lock(lease.NameFor(ip)); k != nil && k.Holder == "node-2" && a.leasesSeen() == "3" {
			return poll.Success()
		}
		return poll.Continue("the update is not in the cache or not handled yet")
	}, poll.WithTimeout(10*time.Second), poll.WithDelay(time.Millisecond))
	names, all, vouched = a.takeLeaseChanges()
	assert.Check(t, names[lease.NameFor(ip)])
	assert.Check(t, !all)
	assert.DeepEqual(t, vouched, []string{"node-2"})
	assert.Equal(t, a.leasesSeen(), "3")

	gone := moved.DeepCopy()
	gone.ResourceVersion = "4"
	events.Delete(gone)
	poll.WaitOn(t, func(poll.LogT) poll.Result {
		if a.lock(lease.NameFor(ip)) == nil && a.leasesSeen() == "4" {
			return poll.Success()
		}
		return poll.Continue("the deletion is not in the cache or not handled yet")
	}, poll.WithTimeout(10*time.Second), poll.WithDelay(time.Millisecond))
	assert.Equal(t, len(a.allLocks()), 0)
	assert.Equal(t, len(a.heartbeats()), 1)
	assert.Equal(t, a.leasesSeen(), "4")
}
