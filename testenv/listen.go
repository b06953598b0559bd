package testenv

import (
	"fmt"
	"net"
	"strconv"
)

// ListenTCP opens a TCP listener in the namespace name (Client, or a
// node) on every address at port, as a host service bound to all
// addresses is: on a node, it is offered the connections to the external
// IPs the node binds too, as far as the node lets them through.
func (c *Cluster) ListenTCP(name string, port uint16) (net.Listener, error) {
	n, err := c.endpoint(name)
	if err != nil {
		return nil, err
	}
	var ln net.Listener
	err = n.ns.do(func() error {
		var err error
		ln, err = net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(int(port))))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listen on TCP port %d in %s: %w", port, name, err)
	}
	return ln, nil
}
