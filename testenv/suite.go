package testenv

import (
	"fmt"
	"os"
)

// SkipEnv, set to 1, lets a suite whose prerequisites are missing pass
// without running, e.g. `go test ./...` by a user who is not root.
const SkipEnv = "EIP_TESTENV_SKIP"

// Unavailable reports on stderr that suite cannot run, and why, and
// returns the test binary's exit code: 0 when SkipEnv=1 says missing
// prerequisites are expected, else 1. A suite that exits 0 without running
// would let `go test ./testenv/...` pass having tested nothing.
func Unavailable(suite string, why error) int {
	if os.Getenv(SkipEnv) == "1" {
		fmt.Fprintf(os.Stderr, "%s: skipped (%s=1): %v\n", suite, SkipEnv, why)
		return 0
	}
	fmt.Fprintf(os.Stderr, "%s: cannot run: %v\n(run it as root after `make build` and scripts/build-k8s.sh, as `make test` does; or set %s=1 to skip it)\n", suite, why, SkipEnv)
	return 1
}
