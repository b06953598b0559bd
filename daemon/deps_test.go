package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	"gotest.tools/v3/assert"
)

// TestLinksOnlyTheAPIGroupsItUses: importing any package of client-go's
// Clientset or informer factory registers every API group at start and
// links their clients, about 6 MiB more resident per eipd (package
// kubeclient). eipd reaches the API server through kubeclient alone.
func TestLinksOnlyTheAPIGroupsItUses(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	assert.NilError(t, err)
	var groups []string
	for _, pkg := range strings.Fields(string(out)) {
		for _, banned := range []string{"k8s.io/client-go/kubernetes", "k8s.io/client-go/informers"} {
			if pkg == banned || strings.HasPrefix(pkg, banned+"/") {
				t.Errorf("eipd imports %s", pkg)
			}
		}
		if strings.HasPrefix(pkg, "k8s.io/api/") {
			groups = append(groups, strings.TrimPrefix(pkg, "k8s.io/api/"))
		}
	}
	slices.Sort(groups)
	assert.DeepEqual(t, groups, []string{"coordination/v1", "core/v1", "discovery/v1"})
}
