package agent

import (
	"context"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/eip-project/eip/internal/endpoints"
)

// sliceWatch is the watch of every EndpointSlice of the cluster. Only the
// IPs of Services with externalTrafficPolicy: Local read it, so it runs
// only while one exists, and a while after (endpoints.Demand): in a
// cluster of Cluster Services, every slice held would be memory, and
// every change CPU, spent for nothing.
type sliceWatch struct {
	demand endpoints.Demand
	// open starts the watch until its context ends, returning its cache
	// and whether that has synced (Agent.watchSlices).
	open   func(ctx context.Context) (cache.Indexer, cache.InformerSynced)
	cancel context.CancelFunc
	idx    cache.Indexer // nil while stopped
	synced cache.InformerSynced
}

// update starts or stops the watch, at now, for whether an IP of a Local
// Service exists, as a child of ctx; it says whether it did either.
func (w *sliceWatch) update(ctx context.Context, needed bool, now time.Time) (started, stopped bool) {
	switch w.demand.Update(needed, now) {
	case endpoints.Start:
		ctx, w.cancel = context.WithCancel(ctx)
		w.idx, w.synced = w.open(ctx)
		return true, false
	case endpoints.Stop:
		w.cancel()
		w.idx, w.synced, w.cancel = nil, nil, nil
		return false, true
	}
	return false, false
}

// ready: the watch runs and its cache has synced, so that a Service
// without a slice in it has none.
func (w sliceWatch) ready() bool { return w.synced != nil && w.synced() }

// slicesOf is the EndpointSlices of Service key ("namespace/name"), none
// while the watch is stopped.
func (w sliceWatch) slicesOf(key string) []*discoveryv1.EndpointSlice {
	if w.idx == nil {
		return nil
	}
	return slicesOf(w.idx, key)
}
