// Package buildinfo says which build of eip is running: the release version
// and commit the Makefile stamped into the binary, and the Go that built
// it. eipd and kubectl-eip print it the same way, and eipd writes it in its
// heartbeat, where `kubectl eip version` reads it.
package buildinfo

import (
	"fmt"
	"runtime"
)

// Info is one build.
type Info struct {
	// Version is the release, such as v0.1.0 (the repository's VERSION
	// file); Commit the commit it was built from.
	Version, Commit string
	// Go is the Go release that built the binary, such as go1.26.0.
	Go string
}

// Of is the running binary's build, given what the Makefile stamped.
func Of(version, commit string) Info {
	return Info{Version: version, Commit: commit, Go: runtime.Version()}
}

// String is the build as `eipd --version` prints it after its name:
// "v0.1.0 (commit 0bef168f1a2b, go1.26.0)".
func (i Info) String() string {
	return fmt.Sprintf("%s (commit %s, %s)", i.Version, i.Commit, i.Go)
}
