package cli

import (
	"fmt"
	"io"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// BenchmarkStatus computes and prints the status of 1,000 and 10,000 IPs
// on three nodes from what the four list calls return: the plugin's own
// share of `kubectl eip status` (testenv's benchmark times the whole
// command).
func BenchmarkStatus(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("%d-IPs", n), func(b *testing.B) { benchmarkStatus(b, n) })
	}
}

func benchmarkStatus(b *testing.B, ips int) {
	s := snapshot{
		namespace: ns,
		configMap: DefaultConfigMap,
		cm:        fixture()[0].(*corev1.ConfigMap),
	}
	nodes := []string{"node-1", "node-2", "node-3"}
	for i, n := range nodes {
		s.nodes = append(s.nodes, node(n, fmt.Sprintf("198.18.0.%d", 11+i)))
		s.leases = append(s.leases, heartbeat(n, now.Add(-100*time.Millisecond), true, "", 333))
	}
	for i := range ips {
		ip := netip.AddrFrom4([4]byte{198, 18, 64 + byte((i+1)/256), byte((i + 1) % 256)})
		svc := externalIPs("default", fmt.Sprintf("svc-%d", i), ip.String())
		s.services = append(s.services, svc)
		s.leases = append(s.leases, lock(ip.String(), nodes[i%3], 1, now.Add(-time.Hour), "default/"+svc.Name))
	}
	s.cm = s.cm.DeepCopy()
	s.cm.Data["ranges"] = "198.18.64.0/18"
	b.ReportAllocs()
	for b.Loop() {
		st := buildStatus(s, now)
		if err := printStatus(io.Discard, st, outputWide); err != nil {
			b.Fatal(err)
		}
	}
}
