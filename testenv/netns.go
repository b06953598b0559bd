package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"

	"github.com/vishvananda/netns"
)

// namespace is a network namespace created by the run, with a handle kept
// open so that the test process can open sockets inside it.
type namespace struct {
	name   string
	handle netns.NsHandle
}

func createNamespace(ctx context.Context, name string) (*namespace, error) {
	if err := run(ctx, nil, "ip", "netns", "add", name); err != nil {
		return nil, err
	}
	h, err := netns.GetFromName(name)
	if err != nil {
		return nil, fmt.Errorf("open netns %s: %w", name, err)
	}
	return &namespace{name: name, handle: h}, nil
}

// do runs fn on an OS thread that has entered the namespace. Sockets that fn
// opens belong to the namespace for their whole life, whichever thread uses
// them later.
func (n *namespace) do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("get current netns: %w", err)
			return
		}
		defer orig.Close()
		if err := netns.Set(n.handle); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter netns %s: %w", n.name, err)
			return
		}
		err = fn()
		if rerr := netns.Set(orig); rerr != nil {
			// The thread stays locked, so the runtime discards it when this
			// goroutine ends instead of reusing it in the wrong namespace.
			errc <- errors.Join(err, fmt.Errorf("leave netns %s: %w", n.name, rerr))
			return
		}
		runtime.UnlockOSThread()
		errc <- err
	}()
	return <-errc
}

// dial opens a connection from inside the namespace.
func (n *namespace) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var conn net.Conn
	err := n.do(func() error {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		conn = c
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("dial %s in netns %s: %w", addr, n.name, err)
	}
	return conn, nil
}

// sysctl writes net.* settings of the namespace.
func (n *namespace) sysctl(kv map[string]string) error {
	return n.do(func() error {
		var errs error
		for k, v := range kv {
			path := "/proc/sys/" + strings.ReplaceAll(k, ".", "/")
			if err := os.WriteFile(path, []byte(v), 0o644); err != nil {
				errs = errors.Join(errs, fmt.Errorf("sysctl %s=%s: %w", k, v, err))
			}
		}
		return errs
	})
}

// pids lists the processes living in the namespace.
func (n *namespace) pids(ctx context.Context) ([]int, error) {
	out, err := output(ctx, nil, "ip", "netns", "pids", n.name)
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		var pid int
		if _, err := fmt.Sscan(f, &pid); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// run runs a command and reports its output in the error.
func run(ctx context.Context, stdin []byte, name string, args ...string) error {
	_, err := output(ctx, stdin, name, args...)
	return err
}

func output(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}
