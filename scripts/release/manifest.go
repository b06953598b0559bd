package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// eipdImage is eipd's image name in manifests/.
const eipdImage = "ghcr.io/eip-project/eipd"

// writeManifest renders the kustomize base in dir with eipd's image set to
// ref, a name:tag@digest, as a kustomization of that base in memory would.
func writeManifest(dir, ref, out string) error {
	name, rest, ok := strings.Cut(ref, ":")
	tag, digest, ok2 := strings.Cut(rest, "@")
	if !ok || !ok2 || !strings.HasPrefix(digest, "sha256:") || tag == "" {
		return fmt.Errorf("manifest: image %q is not name:tag@sha256:digest", ref)
	}
	base, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("manifest: %w", err)
	}
	fs := filesys.MakeFsOnDisk()
	tmp, err := os.MkdirTemp("", "eip-release-manifest-")
	if err != nil {
		return fmt.Errorf("manifest: %w", err)
	}
	defer os.RemoveAll(tmp)
	rel, err := filepath.Rel(tmp, base)
	if err != nil {
		return fmt.Errorf("manifest: %w", err)
	}
	// The image line carries tag and digest: kubelets pull the digest, and
	// a person reading the manifest sees the version.
	k := fmt.Sprintf("resources:\n  - %s\nimages:\n  - name: %s\n    newName: %s\n    newTag: %s@%s\n", rel, eipdImage, name, tag, digest)
	if err := os.WriteFile(filepath.Join(tmp, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		return fmt.Errorf("manifest: %w", err)
	}
	res, err := krusty.MakeKustomizer(&krusty.Options{PluginConfig: types.DisabledPluginConfig()}).Run(fs, tmp)
	if err != nil {
		return fmt.Errorf("manifest: render %s: %w", dir, err)
	}
	b, err := res.AsYaml()
	if err != nil {
		return fmt.Errorf("manifest: %w", err)
	}
	head := fmt.Sprintf("# eip %s: `kubectl apply -f eip.yaml` installs it; then give eip-config's\n# ranges free addresses of your LAN. Rendered from manifests/.\n", tag)
	return os.WriteFile(out, append([]byte(head), b...), 0o644)
}
