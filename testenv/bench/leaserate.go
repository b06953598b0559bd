package bench

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	"github.com/eip-project/eip/internal/lease"
	"github.com/eip-project/eip/testenv"
)

// rateNamespace is where the plain client creates its Leases: no eipd
// watches it.
const rateNamespace = "eip-bench-rate"

// creatorCounts are the numbers of parallel creators tried, in order,
// until one more doubling no longer raises the rate by rateGain.
var creatorCounts = []int{4, 8, 16, 32, 64, 128}

const rateGain = 1.1

// LeaseRate is how fast this API server creates Leases for a plain client.
type LeaseRate struct {
	Leases int `json:"leases"`
	// Tries are the rates (creates/s) per number of parallel creators.
	Tries map[int]float64 `json:"tries"`
	// Best is the highest of them, at Creators.
	Best     float64 `json:"best"`
	Creators int     `json:"creators"`
	// TryCPU is where the machine's CPU went during each try's creates
	// (not its deletes), per number of parallel creators.
	TryCPU map[int]CPUAccount `json:"tryCPU,omitempty"`
	// AsEip is the rate of one more try with Creators creators, as
	// eip's ServiceAccount and in protobuf, as eipd writes, in eipd's
	// namespace while no eipd runs; AsEipCPU its CPU account. Only with
	// profiles, which cover both tries.
	AsEip    float64     `json:"asEip,omitempty"`
	AsEipCPU *CPUAccount `json:"asEipCPU,omitempty"`
}

// BestCPU is the CPU account of the try that set Best.
func (r LeaseRate) BestCPU() (CPUAccount, bool) {
	a, ok := r.TryCPU[r.Creators]
	return a, ok
}

// leaseRate measures the API server's own limit for what an eip cold start
// does: a plain client creates n Leases of the same shape as eip's locks
// with as many parallel creators as help, and deletes them after each try.
// With profileDir it then creates them once more with the best number of
// creators, while profiling the API server for most of that try.
func (e *env) leaseRate(ctx context.Context, n int, profileDir string) (LeaseRate, error) {
	r := LeaseRate{Leases: n, Tries: map[int]float64{}, TryCPU: map[int]CPUAccount{}}
	_, err := e.k.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: rateNamespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return r, fmt.Errorf("lease rate: %w", err)
	}
	// try creates the n Leases in namespace with creators in parallel,
	// and says at what rate, with the CPU account of the creates; the
	// Leases are deleted after, outside the account.
	try := func(k kubernetes.Interface, namespace string, creators int) (float64, CPUAccount, error) {
		leases := k.CoordinationV1().Leases(namespace)
		cpuBefore, err := e.cpuSnapshot()
		if err != nil {
			return 0, CPUAccount{}, err
		}
		began := time.Now()
		err = parallelOn(creators, n, func(i int) error {
			_, err := leases.Create(ctx, lease.NewLockLease(namespace, serviceIP(i), "node-1", "", []string{"default/bench"}, began), metav1.CreateOptions{})
			return err
		})
		took := time.Since(began)
		if err != nil {
			return 0, CPUAccount{}, err
		}
		cpuAfter, err := e.cpuSnapshot()
		if err != nil {
			return 0, CPUAccount{}, err
		}
		err = e.k.CoordinationV1().Leases(namespace).DeleteCollection(ctx, metav1.DeleteOptions{},
			metav1.ListOptions{LabelSelector: lease.RoleLabel + "=" + lease.RoleLock})
		return float64(n) / took.Seconds(), accountBetween(cpuBefore, cpuAfter), err
	}
	for _, creators := range creatorCounts {
		rate, acc, err := try(e.k, rateNamespace, creators)
		if err != nil {
			return r, fmt.Errorf("lease rate: %w", err)
		}
		r.TryCPU[creators] = acc
		r.Tries[creators] = rate
		e.log.Info("lease create rate", "creators", creators, "perSec", rate)
		better := rate > r.Best*rateGain
		if rate > r.Best {
			r.Best, r.Creators = rate, creators
		}
		if !better {
			break
		}
	}
	if profileDir == "" {
		return r, nil
	}
	cfg, err := e.c.ServiceAccountConfig(ctx)
	if err != nil {
		return r, fmt.Errorf("lease rate: %w", err)
	}
	cfg.ContentType = runtime.ContentTypeProtobuf
	asEip, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return r, fmt.Errorf("lease rate: %w", err)
	}
	// Most of each try, its first and last moments left out.
	secs := max(1, int(0.7*float64(n)/r.Best))
	for _, t := range []struct {
		tag       string
		k         kubernetes.Interface
		namespace string
	}{{"plain", e.k, rateNamespace}, {"plain-as-eip", asEip, testenv.Namespace}} {
		profiled := make(chan error, 1)
		go func() { profiled <- e.profileAPIServer(ctx, profileDir, fmt.Sprintf("%d-%s", n, t.tag), secs) }()
		rate, acc, err := try(t.k, t.namespace, r.Creators)
		if perr := <-profiled; perr != nil {
			e.log.Warn("profile", "err", perr)
		}
		if err != nil {
			return r, fmt.Errorf("lease rate: %s: %w", t.tag, err)
		}
		e.log.Info("lease create rate, profiled", "as", t.tag, "creators", r.Creators, "perSec", rate)
		if t.k == asEip {
			r.AsEip, r.AsEipCPU = rate, &acc
		}
	}
	return r, nil
}
