package realnode

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
)

// unmountUnder detaches every mount at or below dir (the kubelet's bind
// mount of its root, projected volumes, sandbox shm, overlay root
// filesystems, pod network namespaces), deepest first.
func unmountUnder(dir string) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	defer f.Close()
	var points []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 5 {
			continue
		}
		p := fields[4] // the run's paths need none of mountinfo's escapes
		if p == dir || strings.HasPrefix(p, dir+"/") {
			points = append(points, p)
		}
	}
	if err := s.Err(); err != nil {
		return err
	}
	// Longest first: children before their parents. A path mounted twice
	// is listed twice and unmounted twice.
	slices.SortStableFunc(points, func(a, b string) int { return len(b) - len(a) })
	var errs error
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = errors.Join(errs, fmt.Errorf("unmount %s: %w", p, err))
		}
	}
	return errs
}
