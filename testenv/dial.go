package testenv

import (
	"context"
	"net"
)

// DialTCP connects to addr from the namespace of name (Client, or a node),
// as a host there would.
func (c *Cluster) DialTCP(ctx context.Context, name, addr string) (net.Conn, error) {
	e, err := c.endpoint(name)
	if err != nil {
		return nil, err
	}
	return e.ns.dial(ctx, "tcp", addr)
}
