package realnode

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// proc is one daemon of a node, its output appended to a log file that
// keeps every start.
type proc struct {
	name string
	log  string
	cmd  *exec.Cmd
	done chan struct{}
}

// joinThenExec is a shell that writes its own pid into each file given
// before "--" (cgroup.procs files), then execs the rest: the daemon is in its
// cgroups before it runs, so every child it starts is too.
const joinThenExec = `while [ "$1" != -- ]; do echo $$ > "$1" || exit 1; shift; done; shift; exec "$@"`

// spawn starts bin in the network namespace netns and in the cgroup group,
// with env added to this process's environment.
func spawn(netns string, group *cgroup, logPath string, env []string, bin string, args ...string) (*proc, error) {
	name := filepath.Base(bin)
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	defer f.Close()
	fmt.Fprintf(f, "=== %s start %s %s\n", time.Now().Format(time.RFC3339Nano), bin, strings.Join(args, " "))
	procs, err := group.procsFiles()
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	argv := append([]string{"-c", joinThenExec, "sh"}, procs...)
	argv = append(argv, "--", "nsenter", "--net=/run/netns/"+netns, "--", bin)
	cmd := exec.Command("/bin/sh", append(argv, args...)...)
	cmd.Stdout, cmd.Stderr = f, f
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait() // how it ended is in its log
		close(p.done)
	}()
	return p, nil
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *proc) kill() error {
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill %s: %w", p.name, err)
	}
	<-p.done
	return nil
}

// term sends SIGTERM and waits up to grace, then kills.
func (p *proc) term(grace time.Duration) error {
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("stop %s: %w", p.name, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
		return p.kill()
	}
}

// tail is the end of the process's log, for errors.
func (p *proc) tail() string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return strings.Join(lines, "\n")
}
