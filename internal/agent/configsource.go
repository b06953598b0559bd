package agent

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/eip-project/eip/internal/config"
	"github.com/eip-project/eip/internal/ipset"
	"github.com/eip-project/eip/internal/lease"
)

// configSource reads the configuration: the ConfigMap from the cache
// and, for an eipd that has no good configuration yet, the last good one
// kept in the cluster (lastgood.go). It hands what it read to desired,
// which keeps the configuration in force.
type configSource struct {
	configMaps corelisters.ConfigMapNamespaceLister
	// name is the ConfigMap's, namespace its namespace's.
	namespace, name string
	lastGood        LastGood // nil: none is kept
	// reserved lists the addresses no range may hold
	// (Agent.reservedAddresses, from the Node and EndpointSlice caches).
	reserved func() map[netip.Addr]string
	recorder record.EventRecorder
	metrics  Metrics
	log      *slog.Logger
}

// load reads the configuration (read) into d, and says whether the one in
// force changed; the liveness judge live (nil before the loop runs) takes
// the renew interval of each one put in force.
func (c *configSource) load(d *desired, saver *lastGoodSaver, live *lease.Liveness) (changed bool) {
	applied, changed := c.read(d, saver)
	if applied && live != nil {
		live.SetTimings(d.cfg.RenewInterval, 2*d.cfg.RenewInterval)
	}
	return changed
}

// read parses the ConfigMap when it changed. An invalid one keeps the
// last good configuration in force, is logged, recorded as a Warning event
// on the ConfigMap and reported in the heartbeat. An eipd that has no good
// configuration yet (it is starting) takes the last good one kept in the
// cluster instead. A good one is offered to saver (nil: none). It
// reports whether a configuration was put in force (applied) and whether
// that changed the one in force.
func (c *configSource) read(d *desired, saver *lastGoodSaver) (applied, changed bool) {
	name := c.namespace + "/" + c.name
	cm, err := c.configMaps.Get(c.name)
	if apierrors.IsNotFound(err) {
		c.metrics.ConfigValid(false)
		if !d.cfgLoaded {
			if applied, changed = c.useLastGood(d, nil, fmt.Sprintf("ConfigMap %s not found", name)); changed {
				return applied, changed
			}
		}
		first, gone := d.missing(name)
		switch {
		case first:
			c.log.Warn("ConfigMap not found: no ranges are configured, so nothing is bound", "configmap", name)
		case gone:
			c.log.Warn(d.cfgErr)
		}
		return applied, first
	}
	if err != nil {
		c.log.Error("read ConfigMap from cache", "configmap", name, "err", err)
		return false, false
	}
	if !d.read(cm.ResourceVersion) {
		return false, false
	}
	cfg, err := c.parse(cm.Data)
	c.metrics.ConfigValid(err == nil)
	if err != nil {
		c.metrics.ConfigError()
		if !d.cfgLoaded {
			if applied, changed = c.useLastGood(d, cm, fmt.Sprintf("invalid configuration: %v", err)); changed {
				return applied, changed
			}
		}
		d.refuse(err, LastGoodName(c.name))
		c.log.Error("invalid configuration; keeping the last good one", "configmap", name, "err", err, "lastGoodInForce", d.cfgLoaded)
		c.recorder.Event(cm, corev1.EventTypeWarning, "InvalidConfig", truncate(d.cfgErr, 1000))
		return applied, false
	}
	for _, w := range cfg.Warnings {
		c.log.Warn("configuration warning", "configmap", name, "warning", w)
		c.recorder.Event(cm, corev1.EventTypeWarning, "ConfigWarning", w)
	}
	if saver != nil {
		saver.offer(cm.Data, cm.ResourceVersion)
	}
	return true, c.putInForce(d, cfg, "", name)
}

// parse parses data and checks it against the addresses no range may
// hold.
func (c *configSource) parse(data map[string]string) (config.Config, error) {
	cfg, err := config.Parse(data)
	if err == nil {
		err = cfg.CheckReserved(c.reserved())
	}
	return cfg, err
}

// putInForce makes cfg, read from source, the configuration in force in
// d, with why the ConfigMap itself is not ("" when it is), and reports
// whether it differs from the one before.
func (c *configSource) putInForce(d *desired, cfg config.Config, why, source string) bool {
	old := d.apply(cfg, why)
	c.log.Info("configuration in force", "source", source, "policy", cfg.Policy, "ranges", len(cfg.Ranges),
		"iface", cfg.Iface, "leaseDuration", cfg.LeaseDuration, "renewInterval", cfg.RenewInterval, "apiLoss", cfg.APILoss)
	if len(cfg.Ranges) == 0 {
		c.log.Warn("no ranges are configured: nothing is bound", "source", source)
	}
	return !old.Equal(cfg)
}

// lastGoodTimeout bounds the read of the last good configuration, which
// happens once, while eipd starts.
const lastGoodTimeout = 5 * time.Second

// useLastGood puts the last good configuration kept in the cluster in
// force in d, because of why (the ConfigMap cm is invalid, or gone when
// cm is nil), and says so in the log, in a Warning event on cm and in the
// heartbeat. It reports whether it put one in force, and whether that
// changed the one in force: not, changing nothing, when none is kept or
// it is not valid either.
func (c *configSource) useLastGood(d *desired, cm *corev1.ConfigMap, why string) (applied, changed bool) {
	if c.lastGood == nil {
		return false, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), lastGoodTimeout)
	defer cancel()
	kept := LastGoodName(c.name)
	data, source, err := c.lastGood.Load(ctx)
	if err != nil || data == nil {
		c.log.Warn("no last good configuration to fall back on", "configmap", kept, "err", err)
		return false, false
	}
	cfg, err := c.parse(data)
	if err != nil {
		c.log.Error("the last good configuration is not valid either", "configmap", kept, "err", err)
		return false, false
	}
	why = fmt.Sprintf("%s; using the last good configuration, kept in ConfigMap %s (from resourceVersion %s)", why, kept, source)
	c.log.Warn("using the last good configuration", "configmap", kept, "sourceResourceVersion", source, "reason", why)
	if cm != nil {
		c.recorder.Event(cm, corev1.EventTypeWarning, "InvalidConfig", truncate(why, 1000))
	}
	return true, c.putInForce(d, cfg, why, kept+" at resourceVersion "+source)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// reservedAddresses are the addresses of every Node and of the API server
// (those eipd connects to and the kubernetes Service's endpoints), each
// with what it is: never bound for a Service.
func (a *Agent) reservedAddresses() map[netip.Addr]string {
	nodes, _ := a.nodes.List(labels.Everything())
	out := ipset.NodeAddresses(nodes)
	maps.Copy(out, ipset.APIEndpoints(a.apiSlices()))
	for _, ip := range a.opt.APIServer {
		out[ip] = config.APIServerAddress
	}
	return out
}
