package agent

import (
	"fmt"
	"maps"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/eip-project/eip/internal/config"
	"github.com/eip-project/eip/internal/ipset"
)

// loadConfig parses the ConfigMap when it changed. An invalid one keeps the
// last good configuration in force, is logged, recorded as a Warning event
// on the ConfigMap and reported in the heartbeat. It returns whether the
// configuration in force changed.
func (s *state) loadConfig() bool {
	name := s.a.opt.Namespace + "/" + s.a.opt.ConfigMap
	cm, err := s.a.configMap.Get(s.a.opt.ConfigMap)
	if apierrors.IsNotFound(err) {
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
	cfg, err := config.Parse(cm.Data)
	if err == nil {
		err = cfg.CheckReserved(s.reservedAddresses())
	}
	if err != nil {
		s.desired.refuse(err)
		s.a.opt.Metrics.ConfigError()
		s.log.Error("invalid configuration; keeping the last good one", "configmap", name, "err", err)
		s.a.recorder.Event(cm, corev1.EventTypeWarning, "InvalidConfig", truncate(s.desired.cfgErr, 1000))
		return false
	}
	for _, w := range cfg.Warnings {
		s.log.Warn("configuration warning", "configmap", name, "warning", w)
		s.a.recorder.Event(cm, corev1.EventTypeWarning, "ConfigWarning", w)
	}
	old := s.desired.apply(cfg)
	if s.live != nil {
		s.live.SetTimings(cfg.RenewInterval, 2*cfg.RenewInterval)
	}
	s.log.Info("configuration in force", "configmap", name, "policy", cfg.Policy, "ranges", len(cfg.Ranges),
		"iface", cfg.Iface, "leaseDuration", cfg.LeaseDuration, "renewInterval", cfg.RenewInterval, "apiLoss", cfg.APILoss)
	if len(cfg.Ranges) == 0 {
		s.log.Warn("no ranges are configured: nothing is bound", "configmap", name)
	}
	return !old.Equal(cfg)
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
func (s *state) reservedAddresses() map[netip.Addr]string {
	nodes, _ := s.a.nodes.List(labels.Everything())
	out := ipset.NodeAddresses(nodes)
	maps.Copy(out, ipset.APIEndpoints(s.a.apiSlices()))
	for _, ip := range s.a.opt.APIServer {
		out[ip] = config.APIServerAddress
	}
	return out
}

// computeEntries recomputes the managed IPs from the Services.
func (s *state) computeEntries() {
	svcs := s.a.allServices()
	entries, rejected := ipset.Compute(svcs, s.desired.cfg, s.desired.reserved)
	s.desired.manage(entries)
	s.book.keepFree(func(ip netip.Addr) bool {
		_, ok := s.desired.entries[ip]
		return ok
	})
	s.filterPorts(entries, svcs)
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
	now := s.a.clk.Now()
	v := s.view(now)
	reporter := len(v.Live) == 0 || v.Live[0] == s.a.opt.Node
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
			s.serviceEvent(r.Service, corev1.EventTypeWarning, "PreferenceIgnored", fmt.Sprintf("%s does not decide where %s lives: %s", ipset.AnnotationPreferredNodes, r.IP, r.Reason))
			continue
		}
		s.serviceEvent(r.Service, corev1.EventTypeWarning, "AddressRejected", fmt.Sprintf("%s is not bound by eip: %s", r.IP, r.Reason))
	}
	s.desired.keepRejected(seen)
}
