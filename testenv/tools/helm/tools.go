//go:build tools

// Package helm pins the helm command that the chart tests run.
package helm

import _ "helm.sh/helm/v4/cmd/helm"
