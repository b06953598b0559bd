package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// process is a command running inside a namespace, its output appended to a
// log file that survives restarts.
type process struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error // valid once done is closed
}

// startProcess runs bin inside the namespace with `ip netns exec`, which
// execs the binary in place, so the pid is the binary's, with env added to
// the environment. Its own process group keeps a terminal's Ctrl-C away from
// it; if the test process dies, the cluster's watchdog kills it.
func startProcess(ns *namespace, name, logPath string, env []string, bin string, args ...string) (*process, error) {
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	defer log.Close()
	fmt.Fprintf(log, "=== %s start %s %s\n", time.Now().Format(time.RFC3339Nano), bin, strings.Join(args, " "))

	cmd := exec.Command("ip", append([]string{"netns", "exec", ns.name, bin}, args...)...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout = log
	cmd.Stderr = log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

func (p *process) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// stop sends sig and waits for the process to exit. A process that ignores
// a gentler signal is killed after grace.
func (p *process) stop(sig syscall.Signal, grace time.Duration) error {
	if !p.running() {
		return nil
	}
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal %s %s: %w", sig, p.name, err)
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-p.done:
		return nil
	case <-timer.C:
	}
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill %s: %w", p.name, err)
	}
	<-p.done
	return fmt.Errorf("stop %s: did not exit within %s of %s, killed", p.name, grace, sig)
}

// exitErr explains how a process that should be running ended.
func (p *process) exitErr() error {
	return fmt.Errorf("%s exited: %v; last lines of %s:\n%s", p.name, p.waitErr, p.logPath, tail(p.logPath, 30))
}

// waitFor polls ready until it returns nil, the process exits, or ctx ends.
func (p *process) waitFor(ctx context.Context, every time.Duration, ready func(context.Context) error) error {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		err := ready(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-p.done:
			return p.exitErr()
		case <-ctx.Done():
			return fmt.Errorf("wait for %s: %w (last error: %v); last lines of %s:\n%s", p.name, ctx.Err(), err, p.logPath, tail(p.logPath, 30))
		case <-tick.C:
		}
	}
}
