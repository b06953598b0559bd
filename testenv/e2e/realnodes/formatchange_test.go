package realnodes

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/eip-project/eip/testenv"
	"github.com/eip-project/eip/testenv/workload"
)

// An upgrade across the change of the liveness datagrams' format (issue
// 29): eip installed from the manifests and image of beforeFormatChange,
// then `kubectl apply -k manifests/` of this tree, which changes the
// image and the RBAC (eipd may no longer create Secrets) and ships the
// liveness key's Secret. While old and new eipds both run, a new one sends
// an old peer both forms of datagram and takes the old form from it
// (docs/design.md, a format change rolls out). What the client sees is a
// rolling update's and nothing more: each IP moves only by its holder's
// hand-off, in at most maxGap, two MACs never answer, no node takes an IP
// over or hands it away as unheard, and the key the old eipds made is
// kept. It runs first in the suite (files in name
// order) and leaves eip installed from this tree's manifests.
func TestRolloutAcrossLivenessFormatChange(t *testing.T) {
	ctx := ctxFor(t, 10*time.Minute)
	root, err := testenv.RepoRoot()
	must(t, err)
	must(t, workload.InstallEIPFrom(ctx, cluster, overlay(t, filepath.Join(oldTree, "manifests"), versionOld)))
	if !runsImage(t, imageName+":"+versionOld) {
		t.FailNow()
	}
	// during's second IP, which installed sets for the other tests.
	lbIP, err = workload.DeployWeb(ctx, cluster)
	must(t, err)
	for _, ip := range []netip.Addr{externalIP, lbIP} {
		settled(t, ip)
	}
	secrets := cluster.Client().CoreV1().Secrets(testenv.Namespace)
	key, err := secrets.Get(ctx, "eip-liveness-key", metav1.GetOptions{})
	must(t, err)

	current, err := workload.ManifestImage()
	must(t, err)
	var began time.Time
	// handedOff, not planned: a pause while the IP stays put is this
	// machine's load stalling the client (1.4 s once, with no ping lost
	// and no lock written), not eip's doing.
	for _, s := range observe(t, "kubectl apply -k manifests/ across the format change", func() {
		began = time.Now()
		kubectl(t, "apply", "-k", overlay(t, filepath.Join(root, "manifests"), strings.TrimPrefix(current, imageName+":")))
		waitDaemonSet(t)
	}) {
		handedOff(t, s)
	}
	runsImage(t, current)
	kept, err := secrets.Get(ctx, "eip-liveness-key", metav1.GetOptions{})
	must(t, err)
	if string(kept.Data["key"]) != string(key.Data["key"]) || len(key.Data["key"]) == 0 {
		t.Errorf("the liveness key changed in the upgrade: %d bytes, then %d", len(key.Data["key"]), len(kept.Data["key"]))
	}
	evs, err := cluster.Client().CoreV1().Events(workload.AppNamespace).List(ctx, metav1.ListOptions{})
	must(t, err)
	for _, ev := range evs.Items {
		at := ev.LastTimestamp.Time
		if ev.EventTime.After(at) {
			at = ev.EventTime.Time
		}
		// Event times are in whole seconds.
		if !at.Before(began.Truncate(time.Second)) && slices.Contains([]string{"TakenOver", "Unheard", "Fenced"}, ev.Reason) {
			t.Errorf("during the rollout, on %s %s: %s %s: %s", ev.InvolvedObject.Kind, ev.InvolvedObject.Name, ev.Type, ev.Reason, ev.Message)
		}
	}
}

// settled waits until HTTP requests through ip all succeed: the web
// application's endpoints reach each node's kube-proxy a moment after its
// Deployment is ready, and requests meanwhile are refused.
func settled(t *testing.T, ip netip.Addr) {
	t.Helper()
	eventually(t, ip.String()+" answers ten requests and refuses none", time.Minute, func() (bool, string) {
		tr := startTraffic(t, ip)
		err := tr.WaitAnswered(ctxFor(t, 10*time.Second), 10)
		s := tr.Finish()
		failed := 0
		for _, r := range s.Requests {
			if r.Err != nil {
				failed++
			}
		}
		return err == nil && failed == 0, fmt.Sprintf("%d of %d requests failed (%v)", failed, len(s.Requests), err)
	})
}

// overlay is a kustomization as a user keeps one: base (a release's
// manifests/), eipd's image at tag, and the ConfigMap's ranges.
func overlay(t *testing.T, base, tag string) string {
	t.Helper()
	dir := t.TempDir()
	rel, err := filepath.Rel(dir, base)
	must(t, err)
	var ranges strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(workload.Ranges), "\n") {
		ranges.WriteString("          " + line + "\n")
	}
	k := fmt.Sprintf(`resources:
  - %s
images:
  - name: %s
    newTag: %s
patches:
  - patch: |-
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: eip-config
        namespace: eip-system
      data:
        ranges: |
%s`, rel, imageName, tag, ranges.String())
	must(t, os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644))
	return dir
}
