// Package kubeclient is eipd's client of the API server: typed clients of
// only the kinds eipd reads and writes (Services, Nodes, ConfigMaps,
// Secrets, Events, Leases, EndpointSlices), over one HTTP client and one
// rate limiter, with a scheme that knows only their API groups.
//
// client-go's Clientset would do, but importing it (or any of its typed
// packages, or its informer factory) registers every API group's types in
// client-go's scheme when the program starts, and links the clients of all
// of them: about 6 MiB more of the executable's pages resident in every
// eipd, and a larger heap, for groups eipd never calls. Package clientset
// adapts a Clientset to Interface, for tests and for kubectl-eip.
package kubeclient
