// Package charts holds eip's Helm chart (charts/eip) and, in its tests, the
// checks that keep it honest: with default values it renders exactly the
// objects of the kustomize base in manifests/; every value it offers shows
// in what it renders; `helm lint` passes; and its alert rules equal
// docs/alerts.rules.yaml and pass `promtool test rules` on series shaped
// like each fault. helm and promtool are real binaries built from their Go
// modules by scripts/build-tool.sh (pinned in testenv/tools). Installing,
// upgrading and uninstalling the chart on a real API server is tested in
// testenv/e2e.
package charts
