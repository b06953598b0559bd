package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

// watchdogScript tears a cluster down once its owner is gone. It blocks
// reading a pipe whose only writer is the owner; the kernel closes that when
// the owner exits however it exits (a test timeout, SIGKILL), and the read
// returns. Arguments: run dir, state file, namespaces.
//
// Real nodes (Options.RealNodes) also have a cgroup subtree per namespace,
// whose processes include pods in network namespaces of their own, and
// mounts under the run directory: kill, unmount (deepest first) and remove
// those too.
const watchdogScript = `read -r _ || true
dir=$1 state=$2
shift 2
for ns in "$@"; do
	for f in $(find /sys/fs/cgroup/*/"$ns" -name cgroup.procs 2>/dev/null); do
		for pid in $(cat "$f"); do kill -9 "$pid"; done
	done
	for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid"; done
	ip netns delete "$ns" 2>/dev/null
done
awk -v d="$dir" '$5 == d || index($5, d "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r | while read -r m; do umount -l "$m"; done
sleep 0.5 # the killed processes leave their cgroups
for ns in "$@"; do
	find /sys/fs/cgroup/*/"$ns" -depth -type d -exec rmdir {} + 2>/dev/null
done
rm -rf -- "$dir"
rm -f -- "$state"
`

// watchdog is a process outside the test process that removes the cluster
// if the test process dies without closing it. (The parent-death signal
// cannot do this job: this machine's kernel does not deliver it.)
type watchdog struct {
	cmd  *exec.Cmd
	pipe *os.File // the owner's end; closing it (or dying) starts the teardown
}

func startWatchdog(dir, statePath string, namespaces []string) (*watchdog, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start watchdog: %w", err)
	}
	defer r.Close()
	cmd := exec.Command("sh", append([]string{"-c", watchdogScript, "eip-testenv-watchdog", dir, statePath}, namespaces...)...)
	cmd.Stdin = r
	// Its own session: a signal to the test's process group spares it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, fmt.Errorf("start watchdog: %w", err)
	}
	return &watchdog{cmd: cmd, pipe: w}, nil
}

// stop ends the watchdog without letting it tear anything down, for a Close
// that does the teardown itself.
func (wd *watchdog) stop() error {
	err := wd.cmd.Process.Kill()
	if errors.Is(err, os.ErrProcessDone) {
		err = nil
	}
	_ = wd.cmd.Wait() // killed: its exit status says nothing
	return errors.Join(err, wd.pipe.Close())
}
