package bench

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// cpuQuota is a cgroup that holds one process to a share of one core, for
// the CPU-starved runs: cgroup v2 (cpu.max) where it is mounted at
// /sys/fs/cgroup, the v1 cpu controller otherwise.
type cpuQuota struct {
	dir    string // the cgroup made for the process
	parent string // where the process goes back to on release
}

const cfsPeriodMicros = 100_000

// limitCPU moves pid into a new cgroup named name limited to percent of
// one core.
func limitCPU(pid int, name string, percent float64) (*cpuQuota, error) {
	quota := strconv.Itoa(int(percent / 100 * cfsPeriodMicros))
	root, v2 := "/sys/fs/cgroup", true
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err != nil {
		root, v2 = "/sys/fs/cgroup/cpu", false
	}
	q := &cpuQuota{dir: filepath.Join(root, name), parent: root}
	if err := os.Mkdir(q.dir, 0o755); err != nil {
		return nil, fmt.Errorf("limit CPU of pid %d: %w", pid, err)
	}
	var err error
	if v2 {
		err = errors.Join(
			writeFile(filepath.Join(root, "cgroup.subtree_control"), "+cpu"),
			writeFile(filepath.Join(q.dir, "cpu.max"), quota+" "+strconv.Itoa(cfsPeriodMicros)))
	} else {
		err = errors.Join(
			writeFile(filepath.Join(q.dir, "cpu.cfs_period_us"), strconv.Itoa(cfsPeriodMicros)),
			writeFile(filepath.Join(q.dir, "cpu.cfs_quota_us"), quota))
	}
	if err == nil {
		err = writeFile(filepath.Join(q.dir, "cgroup.procs"), strconv.Itoa(pid))
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("limit CPU of pid %d: %w", pid, err), q.release())
	}
	return q, nil
}

// release moves the cgroup's processes (every thread, on v1) back to the
// parent and removes the cgroup. A process that has exited is no error.
func (q *cpuQuota) release() error {
	b, err := os.ReadFile(filepath.Join(q.dir, "cgroup.procs"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("release CPU limit %s: %w", q.dir, err)
	}
	for _, pid := range strings.Fields(string(b)) {
		_ = writeFile(filepath.Join(q.parent, "cgroup.procs"), pid)
	}
	if err := os.Remove(q.dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("release CPU limit %s: %w", q.dir, err)
	}
	return nil
}

func writeFile(path, value string) error {
	return os.WriteFile(path, []byte(value), 0o644)
}
