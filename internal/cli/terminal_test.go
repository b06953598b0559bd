package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"gotest.tools/v3/assert"
	"gotest.tools/v3/golden"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/eip-project/eip/internal/lease"
)

// Text anyone who may write a Lease or the ConfigMap chooses: terminal
// control sequences (clear the screen, set the window title, hide text),
// a C1 CSI, DEL and bytes that are not UTF-8.
const (
	hostileError  = "link down\x1b[2J\x1b[H\x1b]0;owned\x07"
	hostileHolder = "node-1\x1b[8m\x7f"
	hostileMoveTo = "node-2\u009b2J"
	hostileNext   = "node-3\x1b]0;t\x07"
	hostilePeer   = "198.18.0.3\r\x1b[1A"
	hostileBytes  = "\xff\x9b31m"
)

// hostile is a cluster whose eip Leases and ConfigMap carry that text.
func hostile() []runtime.Object {
	hb := lease.RenewedHeartbeat(nil, ns, "node-1", 2*time.Second, lease.HeartbeatStatus{
		Eligible: true, Error: hostileError + hostileBytes, Held: 1,
		BGP: hostilePeer + "=established\x1b[5m",
	}, now.Add(-200*time.Millisecond))
	hb.ResourceVersion = "10"
	damaged := lock("198.18.100.8", "node-1", 0, now.Add(-time.Hour))
	damaged.Annotations[lease.AnnotationIP] = "\x1b[2Jgarbage"
	return []runtime.Object{
		&corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: DefaultConfigMap, Namespace: ns},
			Data:       map[string]string{"ranges": "198.18.100.0/24", "policy": "sticky\x1b[2J"},
		},
		node("node-1", "198.18.0.11"), hb,
		externalIPs("default", "web", "198.18.100.1"),
		lease.WithSuccessor(withMoveTo(lock("198.18.100.1", hostileHolder, 1, now.Add(-time.Minute), "default/web"), hostileMoveTo), hostileNext),
		damaged,
	}
}

// terminalSafe fails the test when out holds anything a terminal would act
// on rather than print: a control character other than the newline, or a
// byte that is not UTF-8.
func terminalSafe(t *testing.T, out string) {
	t.Helper()
	assert.Assert(t, utf8.ValidString(out), "not UTF-8: %q", out)
	for i, r := range out {
		assert.Assert(t, r == '\n' || !unicode.IsControl(r), "control character %U at byte %d: %q", r, i, out)
	}
}

// Nobody who may write a Lease or the ConfigMap can put control sequences
// on an operator's terminal: every format prints them escaped, the tables
// readably, json and yaml as escapes that decode to the very text.
func TestStatusEscapesControlCharacters(t *testing.T) {
	for _, format := range []string{"", "wide", "json", "yaml"} {
		t.Run("-o="+format, func(t *testing.T) {
			h := newHarness(t, hostile()...)
			out, err := h.run(context.Background(), "status", "-o", format)
			assert.NilError(t, err)
			terminalSafe(t, out)
			var st Status
			switch format {
			case "json":
				assert.NilError(t, json.Unmarshal([]byte(out), &st))
			case "yaml":
				assert.NilError(t, yaml.Unmarshal([]byte(out), &st))
			case "wide":
				golden.Assert(t, out, "status-hostile-wide.golden")
				return
			default:
				return
			}
			assert.Equal(t, st.IPs[0].Holder, hostileHolder)
			assert.Equal(t, st.IPs[0].MoveTo, hostileMoveTo)
			assert.Equal(t, st.Nodes[0].Error, hostileError+"\ufffd\ufffd31m", "bytes that are not UTF-8 decode as U+FFFD")
			assert.Equal(t, st.Nodes[0].BGPSessions[0].Peer, hostilePeer)
		})
	}
}

// move prints the holder it asked, which the Lease names.
func TestMoveEscapesControlCharacters(t *testing.T) {
	objs := fixture()
	for i, o := range objs {
		if l, ok := o.(*coordinationv1.Lease); ok && l.Name == "eip-198-18-100-1" {
			objs[i] = lock("198.18.100.1", "node-4\x1b[2J", 1, now, "default/web")
		}
	}
	h := newHarness(t, objs...)
	out, err := h.run(context.Background(), "move", "198.18.100.1", "node-2", "--wait=false")
	assert.NilError(t, err)
	assert.Equal(t, out, `requested move of 198.18.100.1 from node-4\x1b[2J to node-2`+"\n")
}

// An error names what the cluster holds, and prints line by line escaped.
func TestWriteError(t *testing.T) {
	var b bytes.Buffer
	WriteError(&b, errors.Join(errors.New("198.18.100.1 went to node-9\x1b]0;x\x07 instead of node-2"), errors.New("tab\there\u0085")))
	assert.Equal(t, b.String(), `error: 198.18.100.1 went to node-9\x1b]0;x\x07 instead of node-2`+"\n"+`tab\there\u0085`+"\n")
}

func TestEscapeControls(t *testing.T) {
	for in, want := range map[string]string{
		"":                      "",
		"plain node-1":          "plain node-1",
		"ünïcödé 节点 ✓":          "ünïcödé 节点 ✓",
		"\x1b[2J":               `\x1b[2J`,
		"a\tb\nc\rd":            `a\tb\nc\rd`,
		"del\x7f":               `del\x7f`,
		"csi\u009b1m nel\u0085": `csi\u009b1m nel\u0085`,
		"bad\xff\xc2":           `bad\xff\xc2`,
		`back\slash`:            `back\slash`,
	} {
		assert.Equal(t, escapeControls(in), want, "%q", in)
	}
	assert.Equal(t, testing.AllocsPerRun(100, func() { escapeControls("198.18.100.1 default/web node-1") }), 0.0)
}

func TestEscapeJSON(t *testing.T) {
	in := map[string]string{"k": "a\x7fb\u009bc\u0085d\x1be ünï"}
	b, err := json.Marshal(in)
	assert.NilError(t, err)
	esc := escapeJSON(b)
	terminalSafe(t, string(esc))
	assert.Equal(t, string(esc), `{"k":"a\u007fb\u009bc\u0085d\u001be ünï"}`)
	var out map[string]string
	assert.NilError(t, json.Unmarshal(esc, &out))
	assert.DeepEqual(t, out, in)
	assert.Assert(t, !strings.Contains(string(escapeJSON([]byte(`{"a":1}`))), `\u`))
}

// zsh and fish print a completion's description, which names the holder.
func TestCompleteEscapesControlCharacters(t *testing.T) {
	h := newHarness(t, hostile()...)
	out, err := h.run(context.Background(), "__complete", "status", "")
	assert.NilError(t, err)
	assert.Equal(t, out, `198.18.100.1	moving on node-1\x1b[8m\x7f`+"\n:4\n")
}
