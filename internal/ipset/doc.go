// Package ipset computes which IPs eip manages: it reads Services and the
// configuration and returns one Entry per IP, with the interface and prefix
// length it is bound with, plus the (Service, IP) pairs it refuses and why.
// It is a pure function of its inputs: no client, no clock, no OS.
//
// An IP is managed when a Service names it in spec.externalIPs, or in
// status.loadBalancer.ingress[].ip of a type LoadBalancer Service whose
// spec.loadBalancerClass is unset or LoadBalancerClass, and it lies inside a
// configured range. An IP named by several Services is one Entry.
//
// Refused, each with a reason for an event on the Service: text that is not
// an IP address, IPv4-mapped IPv6 forms (::ffff:198.18.0.1 would otherwise
// alias 198.18.0.1), zones, addresses no host may answer for (unspecified,
// loopback, multicast, link-local, 0.0.0.0/8, 255.255.255.255), the nodes'
// own addresses, IPs outside every range, and the network and broadcast
// addresses of an IPv4 range written as a CIDR shorter than /31. The ranges
// are the security boundary: whoever may create a Service cannot make a node
// answer for the LAN's gateway or a neighbour (see CVE-2020-8554).
package ipset
