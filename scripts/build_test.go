package scripts

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"
)

// eipd is built with the build tag grpcnotrace wherever it is built, and
// with that tag it links no golang.org/x/net/trace: gRPC (linked through
// GoBGP) imports it otherwise, and its pages, rendered by html/template
// through reflection on methods, make the linker keep every method of
// every type: 68 MB instead of 38.
func TestEipdBuildsWithoutGRPCTrace(t *testing.T) {
	for _, f := range []string{"../Makefile", "../Dockerfile", "image.sh"} {
		b, err := os.ReadFile(f)
		assert.NilError(t, err)
		var builds []string
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "go build") || strings.Contains(line, "$(GO) build") {
				if strings.Contains(line, "./daemon") {
					builds = append(builds, line)
				}
			}
		}
		assert.Assert(t, len(builds) > 0, "%s builds no eipd", f)
		for _, line := range builds {
			assert.Check(t, strings.Contains(line, "grpcnotrace") || strings.Contains(line, "$(EIPD_TAGS)"), "%s: %s", f, line)
		}
	}
	makefile, err := os.ReadFile("../Makefile")
	assert.NilError(t, err)
	assert.Check(t, is.Contains(string(makefile), "\nEIPD_TAGS := grpcnotrace\n"))

	gobin := filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	if _, err := os.Stat(gobin); err != nil {
		gobin = "go"
	}
	out, err := exec.Command(gobin, "list", "-tags", "grpcnotrace", "-deps", "../daemon").CombinedOutput()
	assert.NilError(t, err, "%s", out)
	deps := strings.Fields(string(out))
	assert.Check(t, !slices.Contains(deps, "golang.org/x/net/trace"), "eipd links golang.org/x/net/trace even with grpcnotrace")
	assert.Check(t, slices.Contains(deps, "google.golang.org/grpc"), "eipd no longer links gRPC: this test is moot")
}

// Release builds use the go.sum in the tree and never edit it
// (-mod=readonly): a module missing from go.sum fails the release instead
// of being fetched and trusted on the spot. The flag is on each command
// line, where it overrides the -mod=mod that the Makefile exports for
// development builds.
func TestReleaseBuildsAreReadonly(t *testing.T) {
	for _, f := range []string{"release.sh", "image.sh", "../Dockerfile"} {
		b, err := os.ReadFile(f)
		assert.NilError(t, err)
		assert.Check(t, !strings.Contains(string(b), "-mod=mod"), "%s", f)
		commands := 0
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "go build") || strings.Contains(line, "go run") {
				commands++
				assert.Check(t, strings.Contains(line, " -mod=readonly "), "%s: %s", f, line)
			}
		}
		assert.Check(t, commands > 0, "%s runs no go build", f)
	}
}
