// Package manifests holds eip's kustomize base (namespace, ServiceAccount,
// RBAC, ConfigMap, DaemonSet) and, in its tests, the checks that keep it
// least-privileged and in step with the code: the ConfigMap parses with
// internal/config, the RBAC rules are exactly what eipd uses, the DaemonSet
// adds no capability beyond NET_ADMIN and NET_RAW. Applying it to a real
// API server is tested in testenv.
package manifests
