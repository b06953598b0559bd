package netif

import (
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// Backlog says whether a claim watch holds frames it has not reported
// yet: waiting in its socket, or read and not yet sent on. Whoever takes
// silence for an answer (no answer to a probe: the address is free)
// must first see no backlog, or a watch that fell behind (its process
// short of CPU) turns an answer into silence. The zero value, and one
// whose watch is not running, has none. It is safe for concurrent use.
type Backlog struct {
	rc atomic.Pointer[syscall.RawConn]
	// reading is set before each read of the socket and cleared when a
	// read finds it empty: frames taken by a read stay counted until
	// they are sent on and the next read finds nothing more.
	reading atomic.Bool
}

// Unread says whether frames wait in the watch's socket, or are being
// read or sent on. The socket is asked first: a frame a read takes
// after that is counted by reading, and one sent on since is in the
// consumer's channel.
func (b *Backlog) Unread() bool {
	if b == nil {
		return false
	}
	rc := b.rc.Load()
	if rc == nil {
		return false
	}
	queued := 0
	if err := (*rc).Control(func(fd uintptr) {
		// SIOCINQ on a packet socket: the length of the first frame queued.
		queued, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ)
	}); err != nil {
		return false // the watch ended: it holds nothing
	}
	return queued > 0 || b.reading.Load()
}

// attach ties b to rc until detach.
func (b *Backlog) attach(rc syscall.RawConn) {
	if b != nil {
		b.rc.Store(&rc)
	}
}

func (b *Backlog) detach() {
	if b != nil {
		b.rc.Store(nil)
		b.reading.Store(false)
	}
}

// setReading records whether a read is under way (see reading).
func (b *Backlog) setReading(v bool) {
	if b != nil {
		b.reading.Store(v)
	}
}
