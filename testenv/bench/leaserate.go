package bench

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/eip-project/eip/internal/lease"
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
}

// BestCPU is the CPU account of the try that set Best.
func (r LeaseRate) BestCPU() (CPUAccount, bool) {
	a, ok := r.TryCPU[r.Creators]
	return a, ok
}

// leaseRate measures the API server's own limit for what an eip cold start
// does: a plain client creates n Leases of the same shape as eip's locks
// with as many parallel creators as help, and deletes them after each try.
func (e *env) leaseRate(ctx context.Context, n int) (LeaseRate, error) {
	r := LeaseRate{Leases: n, Tries: map[int]float64{}, TryCPU: map[int]CPUAccount{}}
	_, err := e.k.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: rateNamespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return r, fmt.Errorf("lease rate: %w", err)
	}
	leases := e.k.CoordinationV1().Leases(rateNamespace)
	for _, creators := range creatorCounts {
		cpuBefore, err := e.cpuSnapshot()
		if err != nil {
			return r, fmt.Errorf("lease rate: %w", err)
		}
		began := time.Now()
		err = parallelOn(creators, n, func(i int) error {
			_, err := leases.Create(ctx, lease.NewLockLease(rateNamespace, serviceIP(i), "node-1", []string{"default/bench"}, began), metav1.CreateOptions{})
			return err
		})
		took := time.Since(began)
		if err != nil {
			return r, fmt.Errorf("lease rate: %w", err)
		}
		cpuAfter, err := e.cpuSnapshot()
		if err != nil {
			return r, fmt.Errorf("lease rate: %w", err)
		}
		r.TryCPU[creators] = accountBetween(cpuBefore, cpuAfter)
		rate := float64(n) / took.Seconds()
		r.Tries[creators] = rate
		e.log.Info("lease create rate", "creators", creators, "perSec", rate)
		if err := leases.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			return r, fmt.Errorf("lease rate: delete: %w", err)
		}
		better := rate > r.Best*rateGain
		if rate > r.Best {
			r.Best, r.Creators = rate, creators
		}
		if !better {
			break
		}
	}
	return r, nil
}
