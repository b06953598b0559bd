package netif

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"unsafe"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// TunName is the name template of eipd's address device: the kernel
// replaces %d with the first free number, so two eipds in one network
// namespace (tests, or a restart overlapping the old process) each get
// their own.
const TunName = "eipd%d"

// Tun is a network device whose life is tied to this process: a TUN device
// that is not persistent, so the kernel destroys it, and every address on
// it, when its last file descriptor closes, on SIGKILL too. Addresses bound
// on it need no lifetime, and nothing refreshes them. It carries no
// traffic: the kernel accepts packets for its addresses on any interface,
// and answers ARP for them on the LAN interface while that interface's
// arp_ignore is 0 (see [Addresses.AnswersARP]). It is brought up (the
// kernel adds the addresses' local routes only on a device that is up) and
// makes no IPv6 link-local address, so it adds no route of its own.
//
// Opening it needs /dev/net/tun and CAP_NET_ADMIN.
type Tun struct {
	log *slog.Logger
	ns  netNamespace

	mu   sync.Mutex
	file *os.File
	name string
}

// OpenTun creates the device in the calling thread's network namespace.
func OpenTun(log *slog.Logger) (*Tun, error) {
	ns, err := currentNetNamespace()
	if err != nil {
		return nil, fmt.Errorf("open tun: %w", err)
	}
	return openTunIn(log, ns)
}

// openTunIn creates the device in ns, which the Tun then owns.
func openTunIn(log *slog.Logger, ns netNamespace) (*Tun, error) {
	t := &Tun{log: log, ns: ns}
	if err := t.open(TunName); err != nil {
		_ = ns.close()
		return nil, err
	}
	return t, nil
}

// Name is the device's name.
func (t *Tun) Name() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.name
}

// Ensure makes the device exist and be up again after someone deleted it
// or set it down by hand, and says whether it had to. A recreated device
// has none of the old one's addresses: the caller binds them again.
func (t *Tun) Ensure() (bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var link netlink.Link
	err := t.ns.do(func() error {
		var err error
		link, err = netlink.LinkByName(t.name)
		return err
	})
	switch {
	case errors.As(err, &netlink.LinkNotFoundError{}):
		t.log.Warn("eipd's address device was deleted; creating it again", "iface", t.name)
		_ = t.file.Close()
		return true, t.openLocked(t.name)
	case err != nil:
		return false, fmt.Errorf("find %s: %w", t.name, err)
	case link.Attrs().Flags&unix.IFF_UP == 0:
		t.log.Warn("eipd's address device was set down; setting it up again", "iface", t.name)
		return true, t.up(link)
	}
	return false, nil
}

// Close destroys the device and its addresses.
func (t *Tun) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return errors.Join(t.file.Close(), t.ns.close())
}

func (t *Tun) open(name string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.openLocked(name)
}

func (t *Tun) openLocked(name string) error {
	var f *os.File
	var ifr [unix.IFNAMSIZ + 64]byte
	copy(ifr[:unix.IFNAMSIZ-1], name)
	*(*uint16)(unsafe.Pointer(&ifr[unix.IFNAMSIZ])) = unix.IFF_TUN | unix.IFF_NO_PI
	err := t.ns.do(func() error {
		// The device is created in the namespace of the thread that
		// opened the file.
		var err error
		if f, err = os.OpenFile("/dev/net/tun", os.O_RDWR|unix.O_CLOEXEC, 0); err != nil {
			return fmt.Errorf("open tun: %w", err)
		}
		if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.TUNSETIFF, uintptr(unsafe.Pointer(&ifr[0]))); errno != 0 {
			_ = f.Close()
			return fmt.Errorf("create tun device %s: %w", name, errno)
		}
		return nil
	})
	if err != nil {
		return err
	}
	t.file = f
	t.name = unix.ByteSliceToString(ifr[:unix.IFNAMSIZ])
	var link netlink.Link
	err = t.ns.do(func() error {
		var err error
		if link, err = netlink.LinkByName(t.name); err != nil {
			return fmt.Errorf("find %s: %w", t.name, err)
		}
		// No link-local address, hence no fe80::/64 route via the tun.
		if err := netlink.LinkSetIP6AddrGenMode(link, in6AddrGenModeNone); err != nil {
			return fmt.Errorf("set %s's IPv6 address generation: %w", t.name, err)
		}
		return nil
	})
	if err == nil {
		err = t.up(link)
	}
	if err != nil {
		_ = f.Close()
		return err
	}
	return nil
}

// in6AddrGenModeNone is IN6_ADDR_GEN_MODE_NONE in linux/if_link.h.
const in6AddrGenModeNone = 1

func (t *Tun) up(link netlink.Link) error {
	return t.ns.do(func() error {
		if err := netlink.LinkSetUp(link); err != nil {
			return fmt.Errorf("set %s up: %w", link.Attrs().Name, err)
		}
		return nil
	})
}
