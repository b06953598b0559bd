package endpoints

// Key is kube-proxy on one node, for one Service ("namespace/name").
type Key struct{ Service, Node string }

// Verdict is what kube-proxy's health check of a Service on a node said.
type Verdict int

const (
	// Checking: no verdict yet; kube-proxy there is asked until it
	// delivers to a local endpoint or gives no answer worth waiting for.
	Checking Verdict = iota
	// Delivers: kube-proxy there answered that it delivers to a local
	// endpoint (its health check node port said 200, localEndpoints > 0).
	Delivers
	// Unknown: kube-proxy there cannot tell (the Service has no health
	// check node port, the node no address, nothing listens on it) or did
	// not deliver in time; the EndpointSlices alone decide.
	Unknown
)

// Result is the verdict of check Gen of Key.
type Result struct {
	Key     Key
	Gen     uint64
	Verdict Verdict
}

// Checks are the verdicts of kube-proxy's health checks about the nodes
// with a ready endpoint of a Local Service: one check each time a node
// becomes ready for a Service, none while it stays so. A node's check is
// forgotten once it is no longer ready, so that a new endpoint there is
// checked again.
type Checks struct {
	checks map[Key]check
	gen    uint64
	pass   uint64
}

type check struct {
	verdict  Verdict
	gen      uint64
	lastPass uint64
}

// Judge returns nodes, the readiness of svc's nodes (Nodes), with each
// ready node on which kube-proxy is not yet known to deliver lowered to
// Pending. With ask, a node newly ready gets a check: start is called with
// its key and generation, and returns false when it cannot be made (the
// node then counts as Unknown). Without, no check is begun and a node not
// checked yet stays Ready, as on the EndpointSlices' word: only the nodes
// whose decisions wait for kube-proxy ask (the holder and its successor),
// so that a cluster does not send every node's checks to every node.
func (c *Checks) Judge(svc string, nodes map[string]Readiness, ask bool, start func(Key, uint64) bool) map[string]Readiness {
	if c.checks == nil {
		c.checks = map[Key]check{}
	}
	for node, r := range nodes {
		if r != Ready {
			continue
		}
		k := Key{svc, node}
		ch, ok := c.checks[k]
		if !ok && !ask {
			continue
		}
		if !ok {
			c.gen++
			ch = check{verdict: Checking, gen: c.gen}
			if !start(k, c.gen) {
				ch.verdict = Unknown
			}
		}
		ch.lastPass = c.pass
		c.checks[k] = ch
		if ch.verdict == Checking {
			nodes[node] = Pending
		}
	}
	return nodes
}

// Sweep forgets the checks of the nodes that Judge did not find ready
// since the last Sweep, and begins a new round of Judge. It returns the
// keys forgotten, whose checks are to be cancelled (Runner.Cancel).
func (c *Checks) Sweep() []Key {
	var gone []Key
	for k, ch := range c.checks {
		if ch.lastPass != c.pass {
			delete(c.checks, k)
			gone = append(gone, k)
		}
	}
	c.pass++
	return gone
}

// Done records r and reports whether it changed a verdict: not when its
// node was forgotten, or checked anew, meanwhile.
func (c *Checks) Done(r Result) bool {
	ch, ok := c.checks[r.Key]
	if !ok || ch.gen != r.Gen || ch.verdict == r.Verdict {
		return false
	}
	ch.verdict = r.Verdict
	c.checks[r.Key] = ch
	return true
}

// Outcome is how a wait for kube-proxy ended, for an IP of the Services
// svcs that may now live on nodes: the first of nodes where kube-proxy
// said it delivers to every one of them, with Delivers; else the first
// where it could not tell for one, with Unknown; else "" and Checking
// (the wait ended otherwise: the endpoints changed).
func (c *Checks) Outcome(svcs, nodes []string) (string, Verdict) {
	verdicts := func(node string) (all, unknown bool) {
		all = len(svcs) > 0
		for _, svc := range svcs {
			v := c.checks[Key{svc, node}].verdict
			all = all && v == Delivers
			unknown = unknown || v == Unknown
		}
		return all, unknown
	}
	for _, n := range nodes {
		if all, _ := verdicts(n); all {
			return n, Delivers
		}
	}
	for _, n := range nodes {
		if _, unknown := verdicts(n); unknown {
			return n, Unknown
		}
	}
	return "", Checking
}
