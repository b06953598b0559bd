// Package configtest reads the table of valid and invalid eip-config
// configurations (internal/config/testdata/configs.yaml) that the parser's
// tests and the admission policy's end-to-end test share, so that the two
// judge the same configurations and cannot drift apart.
package configtest

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"sigs.k8s.io/yaml"
)

// Case is one configuration of the table.
type Case struct {
	Name string            `json:"name"`
	Data map[string]string `json:"data"`
	// Problem is part of what both the parser and the admission policy say
	// about an invalid configuration; empty for a valid one.
	Problem string `json:"problem"`
	// Eipd is "warns" when eipd only warns about the problem at run time
	// (an unknown key) where the API server refuses it; empty when both
	// refuse.
	Eipd string `json:"eipd"`
}

// Warns is Case.Eipd for a problem eipd only warns about.
const Warns = "warns"

// Table is the whole table.
type Table struct {
	Valid   []Case `json:"valid"`
	Invalid []Case `json:"invalid"`
}

// Read reads the table from its place in the repository.
func Read() (Table, error) {
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		return Table{}, fmt.Errorf("read configuration table: cannot locate %s", "configtest")
	}
	path := filepath.Join(filepath.Dir(self), "..", "testdata", "configs.yaml")
	b, err := os.ReadFile(path)
	if err != nil {
		return Table{}, fmt.Errorf("read configuration table: %w", err)
	}
	var t Table
	if err := yaml.UnmarshalStrict(b, &t); err != nil {
		return Table{}, fmt.Errorf("read configuration table %s: %w", path, err)
	}
	for _, c := range t.Invalid {
		if c.Problem == "" || c.Eipd != "" && c.Eipd != Warns {
			return Table{}, fmt.Errorf("read configuration table %s: invalid case %q needs a problem, and eipd empty or %q", path, c.Name, Warns)
		}
	}
	return t, nil
}
