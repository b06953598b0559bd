package realnode

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const cgroupFS = "/sys/fs/cgroup"

// cgroup is a path that exists in every cgroup hierarchy mounted under
// /sys/fs/cgroup (this machine has cgroup v1 with a v2 "unified" mount).
type cgroup struct{ path string } // "/eip-<id>-n1" or "/eip-<id>-n1/daemons"

func hierarchies() ([]string, error) {
	entries, err := os.ReadDir(cgroupFS)
	if err != nil {
		return nil, fmt.Errorf("cgroup hierarchies: %w", err)
	}
	var dirs []string
	for _, e := range entries {
		if e.IsDir() {
			dirs = append(dirs, filepath.Join(cgroupFS, e.Name()))
		}
	}
	return dirs, nil
}

// create makes the path in every hierarchy. A new cpuset gets its parent's
// CPUs and memory nodes, without which no task may join it.
func (g *cgroup) create() error {
	hs, err := hierarchies()
	if err != nil {
		return err
	}
	for _, h := range hs {
		dir := filepath.Join(h, g.path)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("create cgroup %s: %w", dir, err)
		}
		if filepath.Base(h) != "cpuset" {
			continue
		}
		// Parents first: a child may only have what its parent has.
		d := h
		for _, part := range strings.Split(strings.Trim(g.path, "/"), "/") {
			d = filepath.Join(d, part)
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				b, err := os.ReadFile(filepath.Join(h, f))
				if err != nil {
					return fmt.Errorf("create cgroup %s: %w", dir, err)
				}
				if err := os.WriteFile(filepath.Join(d, f), b, 0o644); err != nil {
					return fmt.Errorf("create cgroup %s: %w", d, err)
				}
			}
		}
	}
	return nil
}

// procsFiles are the cgroup.procs files of the cgroup, one per hierarchy.
func (g *cgroup) procsFiles() ([]string, error) {
	hs, err := hierarchies()
	if err != nil {
		return nil, err
	}
	files := make([]string, 0, len(hs))
	for _, h := range hs {
		files = append(files, filepath.Join(h, g.path, "cgroup.procs"))
	}
	return files, nil
}

// pids lists every process in the subtree (in any hierarchy).
func (g *cgroup) pids() ([]int, error) {
	hs, err := hierarchies()
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, h := range hs {
		err := filepath.WalkDir(filepath.Join(h, g.path), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}
			if d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			b, err := os.ReadFile(p)
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && !slices.Contains(pids, pid) {
					pids = append(pids, pid)
				}
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("list cgroup %s: %w", g.path, err)
		}
	}
	return pids, nil
}

// killAll SIGKILLs every process in the subtree until it is empty.
func (g *cgroup) killAll() error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		pids, err := g.pids()
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s: processes %v survive SIGKILL", g.path, pids)
		}
		for _, pid := range pids {
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				return fmt.Errorf("kill pid %d of cgroup %s: %w", pid, g.path, err)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// remove kills what is left in the subtree and removes it, children first.
func (g *cgroup) remove() error {
	if err := g.killAll(); err != nil {
		return err
	}
	hs, err := hierarchies()
	if err != nil {
		return err
	}
	var errs error
	for _, h := range hs {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(h, g.path), func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for _, d := range slices.Backward(dirs) {
			// A cgroup whose last task just died may briefly refuse removal.
			var err error
			for range 50 {
				if err = syscall.Rmdir(d); err == nil || errors.Is(err, syscall.ENOENT) {
					err = nil
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if err != nil {
				errs = errors.Join(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
			}
		}
	}
	return errs
}
