package docs

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gotest.tools/v3/assert"

	"github.com/eip-project/eip/internal/config"
)

// The front door's budget, and docs/bench's.
const (
	readmeMaxLines = 200
	benchMaxBytes  = 2 << 20
)

// Pages written for the people who run eip as it is today hold no history.
// design-notes.md is where the history of the design lives, and
// benchmarks.md keeps a history table in the section named here.
var (
	historyPages   = []string{"design-notes.md"}
	historySection = map[string]string{"benchmarks.md": "## History"}
)

// historyWords are phrases that tell when something happened or what it
// was before, not what it is: a user page states what eip does today.
var historyWords = []string{
	"that morning", "this morning", "that afternoon", "this afternoon", "that evening",
	"this evening", "the same evening", "yesterday", "the day's", "this session",
	"last session", "earlier session", "earlier run", "last round", "this round",
	"before/after", "used to",
}

// aDate matches a calendar date, "7 December" or "2026-12-07": when a
// figure was taken belongs in the history, not on a user page.
var aDate = regexp.MustCompile(`\b([0-9]{1,2} (January|February|March|April|May|June|July|August|September|October|November|December)|20[0-9]{2}-[01][0-9]-[0-3][0-9])\b`)

// commitHash matches what looks like an abbreviated or full commit hash: a
// word of 7 to 40 lower-case hex digits holding both a digit and a letter.
var commitHash = regexp.MustCompile(`\b[0-9a-f]{7,40}\b`)

func TestREADMEIsAFrontDoor(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	assert.NilError(t, err)
	lines := strings.Count(string(b), "\n")
	assert.Assert(t, lines <= readmeMaxLines, "README.md has %d lines; the front door holds at most %d: move the detail to docs/", lines, readmeMaxLines)
}

func TestUserPagesHoldNoHistory(t *testing.T) {
	fsys := os.DirFS("..")
	pages, err := userPages(fsys)
	assert.NilError(t, err)
	assert.Assert(t, slices.Contains(pages, "README.md") && slices.Contains(pages, "docs/operating.md"), "%v", pages)
	for _, p := range pages {
		b, err := fs.ReadFile(fsys, p)
		assert.NilError(t, err)
		for _, problem := range historyIn(string(b), historySection[path.Base(p)]) {
			t.Errorf("%s:%s", p, problem)
		}
	}
}

func TestHistoryInFindsEachKind(t *testing.T) {
	// Built from pieces, so that this file's own scan of the docs does not
	// matter; this file is Go, which the scan does not read.
	page := "# Page\n\nFixed in `a1b2c3d`.\nThat morning (7 December, or 2026-12-07) it took 2 s.\n" +
		"A deadbeef value, a 1234567 count, a 02:ee:00:00:00:01 MAC, refused to it.\n" +
		"## History\n\n| fix (`9f8e7d6`) | earlier run |\n"
	assert.DeepEqual(t, historyIn(page, ""), []string{
		"3: commit hash a1b2c3d",
		"4: date 7 December",
		"4: date 2026-12-07",
		`4: history word "that morning"`,
		"8: commit hash 9f8e7d6",
		`8: history word "earlier run"`,
	})
	assert.DeepEqual(t, historyIn(page, "## History"), []string{
		"3: commit hash a1b2c3d",
		"4: date 7 December",
		"4: date 2026-12-07",
		`4: history word "that morning"`,
	})
}

// userPages returns README.md and the Markdown pages of docs/, less those
// where history belongs.
func userPages(fsys fs.FS) ([]string, error) {
	docs, err := fs.Glob(fsys, "docs/*.md")
	if err != nil {
		return nil, err
	}
	pages := []string{"README.md"}
	for _, p := range docs {
		if !slices.Contains(historyPages, path.Base(p)) {
			pages = append(pages, p)
		}
	}
	return pages, nil
}

// historyIn returns "line: what" for every commit hash and history word in
// a page, up to the heading historySection ("" for none), where the
// page's history table starts and runs to the next heading of its level.
func historyIn(page, historySection string) []string {
	var problems []string
	inHistory := false
	sc := bufio.NewScanner(strings.NewReader(page))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			inHistory = historySection != "" && line == historySection
		}
		if inHistory {
			continue
		}
		for _, h := range commitHash.FindAllString(line, -1) {
			if strings.ContainsAny(h, "0123456789") && strings.ContainsAny(h, "abcdef") {
				problems = append(problems, fmt.Sprintf("%d: commit hash %s", n, h))
			}
		}
		for _, d := range aDate.FindAllString(line, -1) {
			problems = append(problems, fmt.Sprintf("%d: date %s", n, d))
		}
		for _, w := range historyWords {
			if historyWord(w).MatchString(line) {
				problems = append(problems, fmt.Sprintf("%d: history word %q", n, w))
			}
		}
	}
	return problems
}

// historyWord matches w as whole words, in any case: "used to" but not
// "refused to".
func historyWord(w string) *regexp.Regexp {
	return regexp.MustCompile(`(?i)\b` + regexp.QuoteMeta(w) + `\b`)
}

func TestDocsIndexLinksEveryPage(t *testing.T) {
	pages, err := fs.Glob(os.DirFS("."), "*.md")
	assert.NilError(t, err)
	b, err := os.ReadFile("README.md")
	assert.NilError(t, err)
	index := string(b)
	for _, p := range pages {
		if p != "README.md" && !strings.Contains(index, "]("+p+")") {
			t.Errorf("docs/README.md does not link %s: every page of docs/ has a line in the index", p)
		}
	}
}

func TestBenchFitsItsBudget(t *testing.T) {
	var total int64
	err := fs.WalkDir(os.DirFS("bench"), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		total += info.Size()
		return err
	})
	assert.NilError(t, err)
	assert.Assert(t, total <= benchMaxBytes, "docs/bench holds %d bytes, over its %d: keep one run per scenario", total, benchMaxBytes)
}

// TestConfigurationReferenceMatchesTheParser checks that
// docs/configuration.md's table of keys has a row for every key the
// parser reads, with the parser's default: `value` in the default column,
// or a description in parentheses when the default is to have none.
func TestConfigurationReferenceMatchesTheParser(t *testing.T) {
	b, err := os.ReadFile("configuration.md")
	assert.NilError(t, err)
	rows := keyRows(string(b))
	assert.Assert(t, len(rows) > 0, "configuration.md has no table of keys under ## Keys")
	for _, k := range config.Reference() {
		def, ok := rows[k.Name]
		switch {
		case !ok:
			t.Errorf("configuration.md has no row for the key %q", k.Name)
		case k.Default == "" && !strings.HasPrefix(def, "("):
			t.Errorf("configuration.md: %s: default %q, but the parser's default is none (write it in parentheses)", k.Name, def)
		case k.Default != "" && !strings.Contains(def, "`"+k.Default+"`"):
			t.Errorf("configuration.md: %s: default %q, but the parser's is `%s`", k.Name, def, k.Default)
		}
	}
}

func TestKeyRows(t *testing.T) {
	md := "# C\n\n| key | type | default | example |\n|---|---|---|---|\n| `a` | t | `1` | `2` |\n\n## Keys\n\n" +
		"| key | type | default | example |\n|---|---|---|---|\n| `b` | t | (none) | `x` |\n| `c` | t | ¾: `3s` | `1s` |\n\n| `d` | t | `4` | |\n"
	assert.DeepEqual(t, keyRows(md), map[string]string{"b": "(none)", "c": "¾: `3s`"})
}

// keyRows reads the first table after the heading "## Keys": each row's
// key (its first cell, in backticks) and default (its third cell).
func keyRows(md string) map[string]string {
	_, after, ok := strings.Cut(md, "\n## Keys\n")
	if !ok {
		return nil
	}
	rows := map[string]string{}
	inTable := false
	for _, line := range strings.Split(after, "\n") {
		if !strings.HasPrefix(line, "|") {
			if inTable {
				break
			}
			continue
		}
		inTable = true
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		if len(cells) < 3 {
			continue
		}
		key := strings.TrimSpace(cells[0])
		if strings.HasPrefix(key, "`") && strings.HasSuffix(key, "`") {
			rows[strings.Trim(key, "`")] = strings.TrimSpace(cells[2])
		}
	}
	return rows
}
