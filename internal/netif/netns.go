package netif

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// netNamespace pins the network namespace an adapter was created in. Sockets
// and /proc/sys/net files belong to the namespace of the OS thread that opens
// them, and a goroutine may run on any thread, so work that opens them later
// runs through do.
type netNamespace struct {
	handle netns.NsHandle
}

func currentNetNamespace() (netNamespace, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	h, err := netns.Get()
	if err != nil {
		return netNamespace{}, fmt.Errorf("get network namespace: %w", err)
	}
	return netNamespace{handle: h}, nil
}

// do runs fn on an OS thread inside the namespace.
func (n netNamespace) do(fn func() error) error {
	runtime.LockOSThread()
	cur, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("get network namespace: %w", err)
	}
	defer cur.Close()
	if cur.Equal(n.handle) {
		defer runtime.UnlockOSThread()
		return fn()
	}
	if err := netns.Set(n.handle); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter network namespace: %w", err)
	}
	fnErr := fn()
	if err := netns.Set(cur); err != nil {
		// The thread stays locked to this goroutine, so no other goroutine
		// inherits the wrong namespace; the runtime retires the thread when
		// the goroutine exits.
		return errors.Join(fnErr, fmt.Errorf("leave network namespace: %w", err))
	}
	runtime.UnlockOSThread()
	return fnErr
}

func (n netNamespace) close() error {
	return n.handle.Close()
}

// dup is another handle on the same namespace, for a Tun to own.
func (n netNamespace) dup() (netNamespace, error) {
	fd, err := unix.FcntlInt(uintptr(n.handle), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return netNamespace{}, fmt.Errorf("duplicate network namespace handle: %w", err)
	}
	return netNamespace{handle: netns.NsHandle(fd)}, nil
}
