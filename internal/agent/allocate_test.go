package agent

import (
	"net/netip"
	"testing"

	"gotest.tools/v3/assert"
	corev1 "k8s.io/api/core/v1"
)

func TestIngress(t *testing.T) {
	vip, proxy := corev1.LoadBalancerIPModeVIP, corev1.LoadBalancerIPModeProxy
	old := []corev1.LoadBalancerIngress{
		{Hostname: "lb.example"},
		{IP: "198.18.101.1", IPMode: &proxy, Ports: []corev1.PortStatus{{Port: 80, Protocol: corev1.ProtocolTCP}}},
		{IP: "198.18.101.9"},
	}
	got := ingress(old, []netip.Addr{netip.MustParseAddr("198.18.101.1"), netip.MustParseAddr("2001:db8::1")})
	assert.DeepEqual(t, got, []corev1.LoadBalancerIngress{
		{Hostname: "lb.example"},
		{IP: "198.18.101.1", IPMode: &proxy, Ports: []corev1.PortStatus{{Port: 80, Protocol: corev1.ProtocolTCP}}},
		{IP: "2001:db8::1", IPMode: &vip},
	})
	assert.Equal(t, len(ingress(nil, nil)), 0)
}
