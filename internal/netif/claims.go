package netif

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/mdlayher/packet"
	"golang.org/x/sys/unix"
)

// Claim says a machine other than this one announced that it holds IP, from
// MAC, on Iface.
type Claim struct {
	Iface string
	IP    netip.Addr
	MAC   net.HardwareAddr
}

// WatchClaims reports, until ctx ends, every address another machine claims
// on iface (in the calling thread's network namespace): the sender of every
// ARP request or reply, the target of every neighbour advertisement and the
// source of every neighbour solicitation, unless the frame comes from
// iface's own MAC. It sees what reaches iface: broadcasts, ff02::1 and the
// solicited-node groups of the addresses bound there. The consumer decides
// which claims matter (those for addresses it holds). It returns nil when ctx
// ends and an error if it cannot listen or the interface goes away.
func WatchClaims(ctx context.Context, log *slog.Logger, iface string, out chan<- Claim) error {
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		return fmt.Errorf("watch claims on %s: %w", iface, err)
	}
	filter, err := claimFilter()
	if err != nil {
		return fmt.Errorf("watch claims on %s: %w", iface, err)
	}
	conn, err := packet.Listen(ifi, packet.Raw, unix.ETH_P_ALL, &packet.Config{Filter: filter})
	if err != nil {
		return fmt.Errorf("watch claims on %s: %w", iface, err)
	}
	defer conn.Close()
	// Unsolicited NAs go to all nodes; the kernel joins that group only
	// while IPv6 is enabled on the link.
	if err := conn.JoinGroup(allNodesMAC()); err != nil {
		log.Warn("cannot join the all-nodes group; IPv6 claims may go unseen", "iface", iface, "err", err)
	}
	stop := context.AfterFunc(ctx, func() {
		// Wakes the blocked read; the loop then sees ctx is done.
		_ = conn.SetReadDeadline(time.Unix(1, 0))
	})
	defer stop()

	own := ifi.HardwareAddr
	buf := make([]byte, claimSnapLen)
	for {
		n, _, err := conn.ReadFrom(buf)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				continue
			}
			return fmt.Errorf("watch claims on %s: %w", iface, err)
		}
		ip, mac, ok := parseClaim(buf[:n], own)
		if !ok {
			continue
		}
		log.Debug("address claimed on the wire", "iface", iface, "ip", ip, "mac", mac)
		select {
		case out <- Claim{Iface: iface, IP: ip, MAC: mac}:
		case <-ctx.Done():
			return nil
		}
	}
}
