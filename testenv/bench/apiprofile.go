package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// profileAPIServer saves kube-apiserver's CPU profile of the secs seconds
// from when it is called, with its /metrics text just before and just
// after them, so that what the profile shows can be divided by the
// requests and watch events of the same seconds. The cluster must serve
// /debug/pprof (testenv.Options.Profiling).
func (e *env) profileAPIServer(ctx context.Context, dir, tag string, secs int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("profile kube-apiserver: %w", err)
	}
	get := func(path, file string, params map[string]string) error {
		req := e.k.Discovery().RESTClient().Get().AbsPath(path)
		for k, v := range params {
			req = req.Param(k, v)
		}
		b, err := req.DoRaw(ctx)
		if err != nil {
			return fmt.Errorf("profile kube-apiserver: %s: %w", path, err)
		}
		return os.WriteFile(filepath.Join(dir, fmt.Sprintf("kube-apiserver-%s-%s", tag, file)), b, 0o644)
	}
	if err := get("/metrics", "metrics-before.txt", nil); err != nil {
		return err
	}
	if err := get("/debug/pprof/profile", "cpu.pprof", map[string]string{"seconds": strconv.Itoa(secs)}); err != nil {
		return err
	}
	return get("/metrics", "metrics-after.txt", nil)
}
