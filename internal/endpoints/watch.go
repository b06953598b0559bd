package endpoints

import "time"

// WatchGrace is how long the cluster-wide watch of EndpointSlices outlives
// the last Service with externalTrafficPolicy: Local that has an eip IP: a
// Service deleted and created again, or switched to Cluster and back,
// within it costs no second list of every EndpointSlice.
const WatchGrace = 15 * time.Second

// Demand decides when the cluster-wide watch of EndpointSlices runs. Only
// the IPs of Local Services read it; in a cluster of Cluster Services it
// would be memory and CPU spent on every EndpointSlice for nothing. It
// runs from the first Local IP on, and stops once none has been for
// WatchGrace. The zero Demand is stopped.
type Demand struct {
	running bool
	// unneeded is since when no Local IP has existed while running; zero
	// while one exists.
	unneeded time.Time
}

// Change is what to do with the watch.
type Change int

const (
	Keep Change = iota
	Start
	Stop
)

// Update takes whether some IP of a Local Service exists at now, and says
// what to do with the watch: Start it, Stop it or Keep it as it is. A
// watch kept while unneeded stops at the first Update from WatchGrace on.
func (d *Demand) Update(needed bool, now time.Time) Change {
	switch {
	case needed:
		d.unneeded = time.Time{}
		if !d.running {
			d.running = true
			return Start
		}
	case !d.running:
	case d.unneeded.IsZero():
		d.unneeded = now
	case !now.Before(d.unneeded.Add(WatchGrace)):
		d.running, d.unneeded = false, time.Time{}
		return Stop
	}
	return Keep
}
