//go:build tools

// Package govulncheck pins govulncheck and the vulnerability database it
// checks against (scripts/vulncheck.sh).
package govulncheck

import (
	_ "golang.org/x/vuln/cmd/govulncheck"
	_ "golang.org/x/vulndb/cmd/indexdb"
)
