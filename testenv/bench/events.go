package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// EventCounts is what one eipd posted as Events from a scale run's cold
// start to the end of its steady window: on Services (repeats folded into
// one Event count each), and the EventsSummarised Events on its Node with
// the number of Events they say were left out.
type EventCounts struct {
	OnServices int `json:"onServices"`
	Summaries  int `json:"summaries"`
	Summarised int `json:"summarised"`
}

// eventBudget is a node's budget of Events on Services of each type,
// Normal and Warning (eipd's internal/agent/events.go): that many at once,
// one more each second.
const eventBudget = 100

// countEvents counts, per node, the Events eipd posted since since.
func (e *env) countEvents(ctx context.Context, since time.Time) (map[string]EventCounts, error) {
	list, err := e.k.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "source=eipd"})
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	out := map[string]EventCounts{}
	for _, ev := range list.Items {
		if ev.CreationTimestamp.Time.Before(since.Truncate(time.Second)) {
			continue
		}
		c := out[ev.Source.Host]
		switch {
		case ev.InvolvedObject.Kind == "Service":
			c.OnServices += int(max(1, ev.Count))
		case ev.InvolvedObject.Kind == "Node" && ev.Reason == "EventsSummarised":
			c.Summaries++
			c.Summarised += leftOut(ev)
		}
		out[ev.Source.Host] = c
	}
	return out, nil
}

// leftOut is the number of Events a summary says were left out: the
// number its message starts with.
func leftOut(ev corev1.Event) int {
	var n int
	if _, err := fmt.Sscanf(ev.Message, "%d Events on Services", &n); err != nil || !strings.Contains(ev.Message, " not posted ") {
		return 0
	}
	return n
}
