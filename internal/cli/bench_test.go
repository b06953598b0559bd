package cli

import (
	"bytes"
	"fmt"
	"io"
	"net/netip"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
)

// BenchmarkStatus decodes the Lease and Service lists of 1,000 and 10,000
// IPs on three nodes as the API server encodes them, then computes and
// prints the status: the plugin's own share of `kubectl eip status`
// (testenv's benchmark times the whole command).
func BenchmarkStatus(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("%d-IPs", n), func(b *testing.B) { benchmarkStatus(b, n) })
	}
}

func benchmarkStatus(b *testing.B, ips int) {
	s := snapshot{
		namespace: ns,
		configMap: DefaultConfigMap,
		cm:        fixture()[0].(*corev1.ConfigMap).DeepCopy(),
	}
	s.cm.Data["ranges"] = "198.18.64.0/18"
	nodes := []string{"node-1", "node-2", "node-3"}
	leases, services := &coordinationv1.LeaseList{}, &corev1.ServiceList{}
	for i, n := range nodes {
		s.nodes = append(s.nodes, node(n, fmt.Sprintf("198.18.0.%d", 11+i)))
		leases.Items = append(leases.Items, *heartbeat(n, now.Add(-100*time.Millisecond), true, "", 333))
	}
	for i := range ips {
		ip := netip.AddrFrom4([4]byte{198, 18, 64 + byte((i+1)/256), byte((i + 1) % 256)})
		svc := withBookkeeping(externalIPs("default", fmt.Sprintf("svc-%d", i), ip.String()))
		svc.Spec.ClusterIP, svc.Spec.ClusterIPs = "10.96.0.10", []string{"10.96.0.10"}
		svc.Spec.Ports = []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}
		services.Items = append(services.Items, *svc)
		leases.Items = append(leases.Items, *withBookkeeping(lock(ip.String(), nodes[i%3], 1, now.Add(-time.Hour), "default/"+svc.Name)))
	}
	lb, sb := encode(b, leases), encode(b, services)
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if s.leases, s.locks, err = readLeaseList(bytes.NewReader(lb)); err != nil {
			b.Fatal(err)
		}
		if s.claims, err = readServiceList(bytes.NewReader(sb)); err != nil {
			b.Fatal(err)
		}
		if err := printStatus(io.Discard, buildStatus(s, now), outputWide); err != nil {
			b.Fatal(err)
		}
	}
}
