package agent

import (
	"fmt"
	"log/slog"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/eip-project/eip/internal/lease"
	"github.com/eip-project/eip/internal/policy"
)

// eligibility is whether this node may hold IPs, why not, and whether it
// is stopping. It judges that from this node's Node object, the
// configuration and its interfaces, and says so when the answer changes:
// in the log, the readiness metric and, for an interface the
// configuration names that this node lacks, an Event on the ConfigMap.
type eligibility struct {
	ok       bool
	reason   string
	shutting bool

	node       string
	log        *slog.Logger
	nodes      corelisters.NodeLister
	links      Links
	metrics    Metrics
	recorder   record.EventRecorder
	configMaps corelisters.ConfigMapNamespaceLister
	configMap  string // the name of eip's ConfigMap
}

// mayHold: this node may hold IPs (it is eligible and not stopping).
func (e *eligibility) mayHold() bool { return e.ok && !e.shutting }

// shutDown: this node is stopping; its heartbeat says so.
func (e *eligibility) shutDown() { e.shutting = true }

// of says whether node may hold IPs, as far as this node can tell: a
// peer's heartbeat must say it is eligible and its Node object match the
// configuration's node selector.
func (e *eligibility) of(node string, live *lease.Liveness, selector labels.Selector) bool {
	if node == e.node {
		return e.mayHold()
	}
	hb, ok := live.Heartbeat(node)
	if !ok || !hb.Eligible {
		return false
	}
	n, _ := e.nodes.Get(node)
	ok, _ = policy.NodeEligible(n, selector)
	return ok
}

// judge judges again whether this node may hold IPs under d, unheard
// saying a peer does not hear it over the LAN at lanPort, and says so
// whenever the answer or its reason changes.
func (e *eligibility) judge(d *desired, unheard bool, lanPort uint16) {
	ok, why, missingIface := e.judged(d, unheard, lanPort)
	// Not being eligible by the node selector or for want of ranges is as
	// configured; the other reasons are faults, and a DaemonSet rollout
	// must stop on them (readiness).
	notServing := ""
	if !ok && (missingIface || !d.cfgLoaded || unheard) {
		notServing = why
	}
	e.metrics.NotServing(notServing)
	if ok == e.ok && why == e.reason {
		return
	}
	e.ok, e.reason = ok, why
	if ok {
		e.log.Info("this node is eligible to hold IPs")
		return
	}
	e.log.Warn("this node is not eligible to hold IPs", "reason", why)
	if cm, err := e.configMaps.Get(e.configMap); err == nil && missingIface {
		e.recorder.Event(cm, corev1.EventTypeWarning, "InterfaceMissing",
			fmt.Sprintf("node %s holds no IPs: %s", e.node, why))
	}
}

// judged says whether this node may hold IPs, why not, and whether the
// reason is an interface of the configuration missing here.
func (e *eligibility) judged(d *desired, unheard bool, lanPort uint16) (ok bool, why string, missingIface bool) {
	n, _ := e.nodes.Get(e.node)
	if ok, why := policy.NodeEligible(n, d.cfg.NodeSelector); !ok {
		return false, why, false
	}
	if !d.cfgLoaded {
		return false, "no valid configuration", false
	}
	if unheard {
		return false, fmt.Sprintf("peers do not hear this node's liveness datagrams (UDP port %d)", lanPort), false
	}
	if len(d.cfg.Ranges) == 0 {
		// Without ranges this node manages no IP: peers must not hand it any.
		return false, "no ranges are configured", false
	}
	for _, iface := range d.configuredIfaces() {
		if _, err := e.links.Up(iface); err != nil {
			return false, fmt.Sprintf("interface %q from the configuration: %v", iface, err), true
		}
	}
	return true, "", false
}

// statusError is the error this node's heartbeat reports: why the
// configuration is not in force (cfgErr), the router's refusal
// (routerErr), why this node may hold no IP, and that it is stopping.
func (e *eligibility) statusError(cfgErr, routerErr string) string {
	var parts []string
	if cfgErr != "" {
		parts = append(parts, cfgErr)
	}
	if routerErr != "" {
		parts = append(parts, routerErr)
	}
	if !e.ok && e.reason != "" {
		parts = append(parts, e.reason)
	}
	if e.shutting {
		parts = append(parts, "shutting down")
	}
	return strings.Join(parts, "; ")
}
