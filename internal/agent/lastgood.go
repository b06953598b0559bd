package agent

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The last good configuration is the ConfigMap's data that eipds last
// accepted, kept in the cluster so that an eipd starting while the
// ConfigMap is invalid (a typo followed by a rollout, a reboot of every
// node) serves with it instead of with nothing. It lives in a ConfigMap of
// its own, NAME-last-good beside the configuration, which the manifests
// ship empty and eipd may only read and update (no create): eipd never
// writes its own configuration.
//
// Every eipd that accepts a configuration offers it; the store keeps the
// one read from the newest resourceVersion of the ConfigMap, so that an
// eipd whose cache lags never puts an older configuration back. Equal
// content is not written again, so a change costs each node one read and
// at most one write.

// LastGoodName is the name of the ConfigMap keeping the last good
// configuration of ConfigMap cm.
func LastGoodName(cm string) string { return cm + "-last-good" }

// annotationSource is the resourceVersion of the ConfigMap the kept data
// was read from.
const annotationSource = "eip.io/source-resource-version"

// LastGood is what the agent asks of the place keeping the last good
// configuration.
type LastGood interface {
	// Load returns the kept data and the resourceVersion of the ConfigMap
	// it was read from; nil data when none was kept.
	Load(ctx context.Context) (data map[string]string, source string, err error)
	// Save keeps data, read from the ConfigMap at resourceVersion source,
	// unless what is kept is as new or newer.
	Save(ctx context.Context, data map[string]string, source string) error
}

// LastGoodConfigMap keeps the last good configuration in a ConfigMap.
type LastGoodConfigMap struct {
	ConfigMaps configMapReadWriter
	Name       string
}

// configMapReadWriter is the calls LastGoodConfigMap makes (client-go's
// ConfigMapInterface and kubeclient's have them).
type configMapReadWriter interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.ConfigMap, error)
	Update(ctx context.Context, cm *corev1.ConfigMap, opts metav1.UpdateOptions) (*corev1.ConfigMap, error)
}

var _ LastGood = LastGoodConfigMap{}

// Load reads the kept configuration.
func (l LastGoodConfigMap) Load(ctx context.Context) (map[string]string, string, error) {
	cm, err := l.ConfigMaps.Get(ctx, l.Name, metav1.GetOptions{})
	if err != nil {
		return nil, "", fmt.Errorf("read ConfigMap %s: %w", l.Name, err)
	}
	src := cm.Annotations[annotationSource]
	if src == "" {
		return nil, "", nil
	}
	return cm.Data, src, nil
}

// Save writes data unless the kept one is as new or newer; a write lost to
// another node's is judged again against what that node wrote.
func (l LastGoodConfigMap) Save(ctx context.Context, data map[string]string, source string) error {
	for range 3 {
		cm, err := l.ConfigMaps.Get(ctx, l.Name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("read ConfigMap %s: %w", l.Name, err)
		}
		if !newerSource(source, cm.Annotations[annotationSource]) || maps.Equal(cm.Data, data) && cm.Annotations[annotationSource] != "" {
			return nil
		}
		cm = cm.DeepCopy()
		cm.Data = maps.Clone(data)
		if cm.Annotations == nil {
			cm.Annotations = map[string]string{}
		}
		cm.Annotations[annotationSource] = source
		_, err = l.ConfigMaps.Update(ctx, cm, metav1.UpdateOptions{})
		if !apierrors.IsConflict(err) {
			if err != nil {
				return fmt.Errorf("write ConfigMap %s: %w", l.Name, err)
			}
			return nil
		}
	}
	return fmt.Errorf("write ConfigMap %s: lost to other writers three times", l.Name)
}

// newerSource reports whether resourceVersion a is newer than b. The API
// server's resourceVersions of one object grow; one that is not a number
// is taken as newer than anything but itself.
func newerSource(a, b string) bool {
	if b == "" {
		return true
	}
	x, errA := strconv.ParseUint(a, 10, 64)
	y, errB := strconv.ParseUint(b, 10, 64)
	if errA != nil || errB != nil {
		return a != b
	}
	return x > y
}

// lastGoodSaver writes, off the owner loop, the configurations the loop
// accepts: only the latest one waiting is written.
type lastGoodSaver struct {
	store   LastGood
	log     *slog.Logger
	pending chan lastGoodOffer
}

type lastGoodOffer struct {
	data   map[string]string
	source string
}

func newLastGoodSaver(store LastGood, log *slog.Logger) *lastGoodSaver {
	return &lastGoodSaver{store: store, log: log, pending: make(chan lastGoodOffer, 1)}
}

// offer replaces the configuration waiting to be written, if any.
func (s *lastGoodSaver) offer(data map[string]string, source string) {
	o := lastGoodOffer{data: maps.Clone(data), source: source}
	for {
		select {
		case s.pending <- o:
			return
		default:
			select {
			case <-s.pending:
			default:
			}
		}
	}
}

func (s *lastGoodSaver) run(ctx context.Context, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case o := <-s.pending:
			if err := s.store.Save(ctx, o.data, o.source); err != nil {
				s.log.Warn("keep the last good configuration", "err", err)
			}
		}
	}
}
