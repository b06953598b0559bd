package buildinfo_test

import (
	"runtime"
	"testing"

	"gotest.tools/v3/assert"

	"github.com/eip-project/eip/internal/buildinfo"
)

func TestString(t *testing.T) {
	i := buildinfo.Of("v0.1.0", "0bef168f1a2b")
	assert.Equal(t, i.String(), "v0.1.0 (commit 0bef168f1a2b, "+runtime.Version()+")")
}
