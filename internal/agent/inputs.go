package agent

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/eip-project/eip/internal/config"
	"github.com/eip-project/eip/internal/ipset"
)

// loadConfig parses the ConfigMap when it changed. An invalid one keeps the
// last good configuration in force, is logged, recorded as a Warning event
// on the ConfigMap and reported in the heartbeat. An eipd that has no good
// configuration yet (it is starting) takes the last good one kept in the
// cluster (lastgood.go) instead. It returns whether the configuration in
// force changed.
func (s *state) loadConfig() bool {
	name := s.a.opt.Namespace + "/" + s.a.opt.ConfigMap
	cm, err := s.a.configMap.Get(s.a.opt.ConfigMap)
	if apierrors.IsNotFound(err) {
		s.a.opt.Metrics.ConfigValid(false)
		if !s.desired.cfgLoaded && s.useLastGood(nil, fmt.Sprintf("ConfigMap %s not found", name)) {
			return true
		}
		first, gone := s.desired.missing(name)
		switch {
		case first:
			s.log.Warn("ConfigMap not found: no ranges are configured, so nothing is bound", "configmap", name)
		case gone:
			s.log.Warn(s.desired.cfgErr)
		}
		return first
	}
	if err != nil {
		s.log.Error("read ConfigMap from cache", "configmap", name, "err", err)
		return false
	}
	if !s.desired.read(cm.ResourceVersion) {
		return false
	}
	cfg, err := s.a.parseConfig(cm.Data)
	s.a.opt.Metrics.ConfigValid(err == nil)
	if err != nil {
		s.a.opt.Metrics.ConfigError()
		if !s.desired.cfgLoaded && s.useLastGood(cm, fmt.Sprintf("invalid configuration: %v", err)) {
			return true
		}
		s.desired.refuse(err, LastGoodName(s.a.opt.ConfigMap))
		s.log.Error("invalid configuration; keeping the last good one", "configmap", name, "err", err, "lastGoodInForce", s.desired.cfgLoaded)
		s.a.recorder.Event(cm, corev1.EventTypeWarning, "InvalidConfig", truncate(s.desired.cfgErr, 1000))
		return false
	}
	for _, w := range cfg.Warnings {
		s.log.Warn("configuration warning", "configmap", name, "warning", w)
		s.a.recorder.Event(cm, corev1.EventTypeWarning, "ConfigWarning", w)
	}
	if s.lastGood != nil {
		s.lastGood.offer(cm.Data, cm.ResourceVersion)
	}
	return s.putInForce(cfg, "", name)
}

// parseConfig parses data and checks it against the addresses no range may
// hold.
func (a *Agent) parseConfig(data map[string]string) (config.Config, error) {
	cfg, err := config.Parse(data)
	if err == nil {
		err = cfg.CheckReserved(a.reservedAddresses())
	}
	return cfg, err
}

// putInForce makes cfg, read from source, the configuration in force, with
// why the ConfigMap itself is not ("" when it is), and reports whether it
// differs from the one before.
func (s *state) putInForce(cfg config.Config, why, source string) bool {
	old := s.desired.apply(cfg, why)
	if s.live != nil {
		s.live.SetTimings(cfg.RenewInterval, 2*cfg.RenewInterval)
	}
	s.log.Info("configuration in force", "source", source, "policy", cfg.Policy, "ranges", len(cfg.Ranges),
		"iface", cfg.Iface, "leaseDuration", cfg.LeaseDuration, "renewInterval", cfg.RenewInterval, "apiLoss", cfg.APILoss)
	if len(cfg.Ranges) == 0 {
		s.log.Warn("no ranges are configured: nothing is bound", "source", source)
	}
	return !old.Equal(cfg)
}

// lastGoodTimeout bounds the read of the last good configuration, which
// happens once, while eipd starts.
const lastGoodTimeout = 5 * time.Second

// useLastGood puts the last good configuration kept in the cluster in
// force, because of why (the ConfigMap cm is invalid, or gone when cm is
// nil), and says so in the log, in a Warning event on cm and in the
// heartbeat. It reports false, changing nothing, when none is kept or it
// is not valid either.
func (s *state) useLastGood(cm *corev1.ConfigMap, why string) bool {
	if s.a.opt.LastGood == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), lastGoodTimeout)
	defer cancel()
	kept := LastGoodName(s.a.opt.ConfigMap)
	data, source, err := s.a.opt.LastGood.Load(ctx)
	if err != nil || data == nil {
		s.log.Warn("no last good configuration to fall back on", "configmap", kept, "err", err)
		return false
	}
	cfg, err := s.a.parseConfig(data)
	if err != nil {
		s.log.Error("the last good configuration is not valid either", "configmap", kept, "err", err)
		return false
	}
	why = fmt.Sprintf("%s; using the last good configuration, kept in ConfigMap %s (from resourceVersion %s)", why, kept, source)
	s.log.Warn("using the last good configuration", "configmap", kept, "sourceResourceVersion", source, "reason", why)
	if cm != nil {
		s.a.recorder.Event(cm, corev1.EventTypeWarning, "InvalidConfig", truncate(why, 1000))
	}
	return s.putInForce(cfg, why, kept+" at resourceVersion "+source)
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

// computeEntries recomputes the managed IPs from the Services and the
// owners their locks record.
func (s *state) computeEntries() {
	svcs := s.a.allServices()
	entries, rejected := ipset.Compute(svcs, s.desired.cfg, s.desired.reserved, s.a.recordedOwner)
	s.desired.manage(entries)
	s.events.managed(s.desired.entries)
	s.book.keepFree(func(ip netip.Addr) bool {
		_, ok := s.desired.entries[ip]
		return ok
	})
	s.ports.apply(s.desired.cfg.PortFilter, entries, svcs)
	s.reportRejections(rejected)
}

// reportRejections records a Warning event for each newly rejected address,
// once per node and reason, within the node's Event budget (events.go):
// a ConfigMap edit that leaves a thousand Services' IPs outside every
// range is a thousand rejections at once. Only the first live node
// reports, so a three-node cluster does not triple every event; a node
// that has not yet heard any heartbeat counts as first, which at a
// cluster's start is every node, and the budget bounds that too.
func (s *state) reportRejections(rejected []ipset.Rejection) {
	now := s.clk.Now()
	v := s.view(now)
	reporter := len(v.Live) == 0 || v.Live[0] == s.node
	seen := make(map[string]bool, len(rejected))
	for _, r := range rejected {
		key := r.Service + " " + r.IP + " " + r.Reason
		seen[key] = true
		if !s.desired.reject(key) {
			continue
		}
		s.log.Warn("not managing an address", "service", r.Service, "ip", r.IP, "reason", r.Reason)
		if !reporter {
			continue
		}
		if r.Preference {
			s.events.onService(r.Service, corev1.EventTypeWarning, "PreferenceIgnored", fmt.Sprintf("%s does not decide where %s lives: %s", ipset.AnnotationPreferredNodes, r.IP, r.Reason))
			continue
		}
		s.events.onService(r.Service, corev1.EventTypeWarning, "AddressRejected", fmt.Sprintf("%s is not bound by eip: %s", r.IP, r.Reason))
	}
	s.desired.keepRejected(seen)
}
