package alloc_test

import (
	"slices"
	"strings"
	"testing"

	"gotest.tools/v3/assert"
	corev1 "k8s.io/api/core/v1"

	"github.com/eip-project/eip/internal/alloc"
	"github.com/eip-project/eip/internal/ipset"
)

// FuzzRequestOf: whatever a Service's annotations, loadBalancerIP and IP
// families say, RequestOf refuses it with a sentence or returns a request
// the allocator can serve: at least one family, one when single-stack,
// every requested address of a requested family and at most one a family.
func FuzzRequestOf(f *testing.F) {
	f.Add("198.18.100.7,2001:db8::7", "pool-a, pool-b", "", "IPv4,IPv6", "PreferDualStack")
	f.Add("", "", "198.18.100.7", "", "")
	f.Add("198.18.100.7,198.18.100.8", "", "198.18.100.9", "IPv6", "SingleStack")
	f.Add("::ffff:198.18.100.7", "", "", "IPv4", "RequireDualStack")
	f.Fuzz(func(t *testing.T, ips, ranges, lbIP, families, policy string) {
		svc := &ipset.Service{Namespace: "default", Name: "web", Type: corev1.ServiceTypeLoadBalancer, LoadBalancerIP: lbIP,
			Annotations: map[string]string{alloc.AnnotationIPs: ips, alloc.AnnotationRange: ranges}}
		for _, fam := range strings.FieldsFunc(families, func(r rune) bool { return r == ',' }) {
			svc.Families = append(svc.Families, corev1.IPFamily(fam))
		}
		if policy != "" {
			p := corev1.IPFamilyPolicy(policy)
			svc.FamilyPolicy = &p
		}
		r, err := alloc.RequestOf(svc)
		if err != nil {
			assert.Assert(t, err.Error() != "")
			return
		}
		assert.Equal(t, r.Service, "default/web")
		assert.Assert(t, len(r.Families) >= 1, "%+v", r)
		if policy == "" || policy == string(corev1.IPFamilyPolicySingleStack) {
			assert.Equal(t, len(r.Families), 1)
		}
		seen := map[corev1.IPFamily]bool{}
		for _, ip := range r.IPs {
			fam := alloc.FamilyOf(ip)
			assert.Assert(t, slices.Contains(r.Families, fam), "%s of %v", ip, r.Families)
			assert.Assert(t, !seen[fam], "two addresses of %s in %v", fam, r.IPs)
			seen[fam] = true
		}
		for _, name := range r.Ranges {
			assert.Assert(t, name != "")
		}
	})
}
