// Package ipset computes which IPs eip manages: it reads Services and the
// configuration and returns one Entry per IP, with the interface and prefix
// length it is bound with, plus the (Service, IP) pairs it refuses and why.
// It is a pure function of its inputs: no client, no clock, no OS.
//
// An IP is managed when a Service names it in spec.externalIPs, or in
// status.loadBalancer.ingress[].ip of a type LoadBalancer Service whose
// spec.loadBalancerClass is unset or LoadBalancerClass, and it lies inside a
// configured range that its namespaces= option lets the Service's
// namespace use. spec.externalIPs count only while the external-ips key is
// on. An IP named by several Services is one Entry.
//
// Several Services naming one IP: the Service its lock records as owner
// (namespace, name and UID) keeps it for as long as it names the IP and
// may use it, whatever its age; otherwise, or when no lock records one,
// the oldest (creationTimestamp, then "namespace/name") owns it. Every
// node and the plugin compute this alike from the Services and the locks,
// without talking to each other. Services of the owner's namespace share
// it; a Service of another namespace shares it only when both carry the same
// eip.io/sharing-key, and is refused otherwise. The placement annotation
// eip.io/preferred-nodes is read from the owner's namespace only, and only
// when it lists node names.
//
// Refused, each with a reason for an event on the Service: text that is not
// an IP address, IPv4-mapped IPv6 forms (::ffff:198.18.0.1 would otherwise
// alias 198.18.0.1), zones, addresses no host may answer for (unspecified,
// loopback, multicast, link-local, 0.0.0.0/8, 255.255.255.255), the nodes'
// own addresses, IPs outside every range or in a range kept for other
// namespaces, another namespace's IP, and the network and broadcast
// addresses of an IPv4 range written as a CIDR shorter than /31. The ranges
// are the security boundary: whoever may create a Service cannot make a node
// answer for the LAN's gateway or a neighbour (see CVE-2020-8554).
package ipset
