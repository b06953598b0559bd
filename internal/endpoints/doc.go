// Package endpoints says where an IP of a Service with
// externalTrafficPolicy: Local may live: kube-proxy sends such a Service's
// external traffic only to the endpoints on the node that received it and
// drops it on a node without one, so only a node with a ready endpoint of
// the Service serves the IP. It reads EndpointSlices (their nodeName and
// conditions) and nothing else, and touches no API.
package endpoints
