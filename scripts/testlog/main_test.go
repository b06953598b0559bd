package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"
)

const events = `{"Action":"start","Package":"p"}
{"Action":"run","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Test":"TestA","Output":"=== RUN   TestA\n"}
{"Action":"run","Package":"p","Test":"TestB"}
{"Action":"output","Package":"p","Test":"TestB","Output":"=== RUN   TestB\n"}
{"Action":"output","Package":"p","Test":"TestA","Output":"    a_test.go:9: wrong answer\n"}
{"Action":"output","Package":"p","Test":"TestB","Output":"    b_test.go:3: fine\n"}
{"Action":"pass","Package":"p","Test":"TestB","Elapsed":2.5}
{"Action":"output","Package":"p","Test":"TestA","Output":"--- FAIL: TestA (31.00s)\n"}
{"Action":"fail","Package":"p","Test":"TestA","Elapsed":31}
{"Action":"output","Package":"p","Output":"FAIL\n"}
{"Action":"output","Package":"p","Output":"FAIL\tp\t33.1s\n"}
{"Action":"fail","Package":"p","Elapsed":33.1}
# q
q/q.go:1:1: expected 'package', found x
`

func TestRelayShowsFailuresWholeAndRecordsEveryTest(t *testing.T) {
	var out, rec bytes.Buffer
	assert.NilError(t, relay(strings.NewReader(events), &out, &rec, "e2e", false))
	assert.Equal(t, out.String(), "=== RUN   TestA\n    a_test.go:9: wrong answer\n--- FAIL: TestA (31.00s)\nFAIL\tp\t33.1s\n"+
		"# q\nq/q.go:1:1: expected 'package', found x\n")
	assert.Equal(t, rec.String(), `{"tier":"e2e","package":"p","test":"TestB","action":"pass","seconds":2.5}`+"\n"+
		`{"tier":"e2e","package":"p","test":"TestA","action":"fail","seconds":31}`+"\n")

	out.Reset()
	assert.NilError(t, relay(strings.NewReader(events), &out, &bytes.Buffer{}, "e2e", true))
	assert.Check(t, is.Contains(out.String(), "--- PASS: TestB (2.50s)\n"))
}

func TestSummaryListsTiersAndSlowestTests(t *testing.T) {
	path := filepath.Join(t.TempDir(), "times.jsonl")
	var rec bytes.Buffer
	assert.NilError(t, relay(strings.NewReader(events), &bytes.Buffer{}, &rec, "e2e", false))
	rec.WriteString(`{"tier":"e2e","action":"fail","seconds":40}` + "\n")
	assert.NilError(t, os.WriteFile(path, rec.Bytes(), 0o644))
	var out bytes.Buffer
	assert.NilError(t, printSummary(&out, path, 1))
	assert.Equal(t, out.String(), "== timing summary\n"+
		"  e2e                                         40s  fail  tests: 1 passed, 1 failed, 0 skipped\n"+
		"  all tiers                                   40s\n"+
		"  the 1 slowest tests:\n"+
		"         31s  fail p TestA\n")
}
