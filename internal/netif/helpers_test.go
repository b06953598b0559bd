package netif

import (
	"net"
	"net/netip"

	"github.com/google/go-cmp/cmp"
)

// cmpPrefix lets DeepEqual compare values holding netip types.
func cmpPrefix() cmp.Option {
	return cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })
}

func ourMAC() net.HardwareAddr   { return net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01} }
func theirMAC() net.HardwareAddr { return net.HardwareAddr{0x02, 0, 0, 0, 0, 0x02} }
