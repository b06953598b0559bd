//go:build tools

// Package promtool pins the promtool command that unit-tests the alert rules.
package promtool

import _ "github.com/prometheus/prometheus/cmd/promtool"
