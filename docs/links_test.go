// Package docs holds eip's documentation. Its test keeps the repository
// honest about what exists: every Markdown link, and every docs/… path
// named in Markdown, Go, shell, YAML or the Makefile, must resolve, anchors
// (#section) included, and a Markdown file named without a directory must
// exist somewhere in the repository. A path cited in a commit,
// COMMIT:docs/… (a benchmark run removed from the tree), must exist in
// that commit, and the commit in the history of HEAD.
package docs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"unicode"

	"gotest.tools/v3/assert"
)

func TestRepoReferencesResolve(t *testing.T) {
	inCommit := gitHistory("..")
	if inCommit == nil {
		t.Log("citations of git history (COMMIT:docs/…) not checked: no git, or a shallow clone")
	}
	problems, err := brokenRefs(os.DirFS(".."), inCommit)
	assert.NilError(t, err)
	for _, p := range problems {
		t.Error(p)
	}
}

func TestBrokenRefsFindsEachKind(t *testing.T) {
	// Built from pieces, so that the repository check does not read this
	// file's fixtures as references.
	const d, md = "docs/", ".md"
	a, gone := d+"a"+md, d+"gone"+md
	fsys := fstest.MapFS{
		"README" + md: {Data: []byte("# Top\n\n## How it works: `eipd`\n\n" +
			"[ok](" + a + ") [ok](" + a + "#a-section) [ok](#how-it-works-eipd) [web](https://example.com/x)\n" +
			"[gone](" + gone + ") [no anchor](" + a + "#nowhere) [no anchor here](#nowhere)\n" +
			"`[in code](gone-too" + md + ")`\n" +
			"```sh\n# not a heading\n[in a fence](nowhere" + md + ")\n```\n" +
			"[ref]: " + d + "missing" + md + "\n")},
		a: {Data: []byte("# A\n\n## A section\n\n[up](../README" + md + "#top) [sibling](b" + md + ") [dir](sub/) [not a dir](../README" + md + "/)\n" +
			"The README" + md + " and the LOST" + md + ".\n")},
		d + "sub/x" + md: {Data: []byte("x\n")},
		"internal/x/doc.go": {Data: []byte("// See " + a + " (A section) and " + d + "design" + md + "#targets.\n" +
			"// Not ours: github.com/x/" + d + "y" + md + "\npackage x\n")},
		"scripts/x.sh":     {Data: []byte("# measures what " + a + " says\ncat " + d + "sub/x" + md + " " + gone + "\n")},
		"bin/ignored" + md: {Data: []byte("[gone](" + gone + ")\n")},
		"data.json":        {Data: []byte(gone + "\n")},
	}
	problems, err := brokenRefs(fsys, nil)
	assert.NilError(t, err)
	assert.DeepEqual(t, problems, []string{
		"README" + md + ":6: link " + gone + ": does not exist",
		"README" + md + ":6: link " + a + "#nowhere: no heading #nowhere in " + a,
		"README" + md + ":6: link #nowhere: no heading #nowhere in README" + md,
		"README" + md + ":10: document nowhere" + md + ": no file of that name in the repository",
		"README" + md + ":12: link " + d + "missing" + md + ": does not exist",
		a + ":5: link b" + md + ": does not exist",
		a + ":5: link ../README" + md + "/: is not a directory",
		a + ":6: document LOST" + md + ": no file of that name in the repository",
		"internal/x/doc.go:1: reference " + d + "design" + md + "#targets: does not exist",
		"scripts/x.sh:2: reference " + gone + ": does not exist",
	})
}

func TestBrokenRefsChecksCitationsOfGitHistory(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("needs git:", err)
	}
	dir := t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		args = append([]string{"-C", dir, "-c", "user.name=eip", "-c", "user.email=eip@example.com",
			"-c", "commit.gpgsign=false", "-c", "core.hooksPath=/dev/null"}, args...)
		out, err := exec.Command("git", args...).CombinedOutput()
		assert.NilError(t, err, "git %s: %s", strings.Join(args, " "), out)
		return strings.TrimSpace(string(out))
	}
	write := func(p, data string) {
		t.Helper()
		assert.NilError(t, os.MkdirAll(path.Dir(path.Join(dir, p)), 0o755))
		assert.NilError(t, os.WriteFile(path.Join(dir, p), []byte(data), 0o644))
	}
	// Built from pieces, so that the repository check does not read this
	// file's fixtures as references.
	const d = "docs/"
	git("init", "-q", "-b", "main")
	write(d+"run/table.txt", "x\n")
	git("add", "-A")
	git("commit", "-q", "-m", "a run")
	added := git("rev-parse", "--short", "HEAD")
	git("rm", "-q", "-r", d+"run")
	git("commit", "-q", "-m", "the run removed")
	removed := git("rev-parse", "--short", "HEAD")
	git("checkout", "-q", "-b", "side")
	write(d+"side.txt", "x\n")
	git("add", "-A")
	git("commit", "-q", "-m", "a side branch")
	side := git("rev-parse", "--short", "HEAD")
	git("checkout", "-q", "main")
	write("README.md", "`"+added+":"+d+"run/table.txt`, `git show "+added+":"+d+"run/`\n"+
		added+":"+d+"run/gone.txt\n"+
		removed+":"+d+"run/table.txt\n"+
		side+":"+d+"side.txt\n"+
		"0123456:"+d+"run/table.txt\n"+
		d+"run/table.txt\n")

	problems, err := brokenRefs(os.DirFS(dir), gitHistory(dir))
	assert.NilError(t, err)
	assert.DeepEqual(t, problems, []string{
		"README.md:2: reference " + added + ":" + d + "run/gone.txt: not in commit " + added,
		"README.md:3: reference " + removed + ":" + d + "run/table.txt: not in commit " + removed,
		"README.md:4: reference " + side + ":" + d + "side.txt: commit " + side + " is not in the history of HEAD",
		"README.md:5: reference 0123456:" + d + "run/table.txt: no commit 0123456 in the repository",
		"README.md:6: reference " + d + "run/table.txt: does not exist",
	})

	// Without the history (no git, a shallow clone) a citation is not
	// checked, and is still not read as a path in the tree.
	problems, err = brokenRefs(os.DirFS(dir), nil)
	assert.NilError(t, err)
	assert.DeepEqual(t, problems, []string{"README.md:6: reference " + d + "run/table.txt: does not exist"})
}

func TestSlug(t *testing.T) {
	for heading, want := range map[string]string{
		"How it compares": "how-it-compares",
		"`kubectl eip status -o json|yaml`: the schema":             "kubectl-eip-status--o-jsonyaml-the-schema",
		`Judging a peer dead: "connected" means the watch delivers`: "judging-a-peer-dead-connected-means-the-watch-delivers",
		"Leases: heartbeats and locks":                              "leases-heartbeats-and-locks",
		"Why eipd runs as user 0":                                   "why-eipd-runs-as-user-0",
		"Where IPs live: policies, eligibility, preferred nodes":    "where-ips-live-policies-eligibility-preferred-nodes",
		"A **bold** [link](x.html) and snake_case":                  "a-bold-link-and-snake_case",
	} {
		assert.Equal(t, slug(heading), want, heading)
	}
}

var (
	// mdLink matches an inline link or image target: ](target) or
	// ](target "title").
	mdLink = regexp.MustCompile(`\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	// mdRefDef matches a reference-style link definition.
	mdRefDef = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*<?([^\s>]+)`)
	// docsRef matches a path under docs/ named anywhere in a file, with an
	// optional anchor, when it is not part of a longer path or URL.
	docsRef = regexp.MustCompile(`(^|[^A-Za-z0-9_./-])(docs/[A-Za-z0-9_./-]*[A-Za-z0-9_])(#[a-z0-9_-]+)?`)
	// gitRef matches a path under docs/ in a commit, COMMIT:docs/…, as
	// git names it: how the docs cite a file removed from the tree.
	gitRef = regexp.MustCompile(`(^|[^A-Za-z0-9_./-])([0-9a-f]{7,40}):(docs/[A-Za-z0-9_./-]*[A-Za-z0-9_])`)
	// mdName matches a Markdown file named on its own, without a
	// directory: some file of that name must exist.
	mdName     = regexp.MustCompile(`(^|[^A-Za-z0-9_./-])([A-Za-z0-9_-]+\.md)\b`)
	codeSpan   = regexp.MustCompile("`[^`]*`")
	mdHeading  = regexp.MustCompile(`^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
	headLink   = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	skipDirs   = []string{".git", "bin", "results", "node_modules"}
	checkedExt = []string{".md", ".go", ".sh", ".yaml", ".yml"}
	checkedNam = []string{"Makefile", "Dockerfile", "run"}
)

// brokenRefs returns one line per reference in fsys that does not resolve,
// as "file:line: what: why", in file order. inCommit checks a citation of
// git history, COMMIT:docs/…; with inCommit nil they are not checked.
func brokenRefs(fsys fs.FS, inCommit func(commit, p string) error) ([]string, error) {
	r := &resolver{fsys: fsys, inCommit: inCommit, headings: map[string][]string{}, mdNames: map[string]bool{}}
	var files []string
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if slices.Contains(skipDirs, d.Name()) {
				return fs.SkipDir
			}
			return nil
		}
		if path.Ext(p) == ".md" {
			r.mdNames[d.Name()] = true
		}
		if slices.Contains(checkedExt, path.Ext(p)) || slices.Contains(checkedNam, d.Name()) {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var problems []string
	for _, p := range files {
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return nil, err
		}
		problems = append(problems, r.check(p, b)...)
	}
	return problems, nil
}

type resolver struct {
	fsys     fs.FS
	inCommit func(commit, p string) error // nil: citations of history unchecked
	headings map[string][]string          // Markdown file → its anchors
	mdNames  map[string]bool              // base names of the repository's Markdown files
}

func (r *resolver) check(file string, b []byte) []string {
	var problems []string
	report := func(line int, kind, target string, err error) {
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s:%d: %s %s: %v", file, line, kind, target, err))
		}
	}
	md := path.Ext(file) == ".md"
	fenced := false
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if t := strings.TrimSpace(line); md && (strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~")) {
			fenced = !fenced
			continue
		}
		refs := line
		if md && !fenced {
			// Link targets are checked as links, relative to the file.
			refs = mdRefDef.ReplaceAllString(mdLink.ReplaceAllString(line, "]()"), "")
			prose := codeSpan.ReplaceAllString(line, "")
			targets := mdLink.FindAllStringSubmatch(prose, -1)
			if m := mdRefDef.FindStringSubmatch(prose); m != nil {
				targets = append(targets, m)
			}
			for _, m := range targets {
				switch {
				case isExternal(m[1]):
				case strings.HasPrefix(m[1], "#"):
					report(n, "link", m[1], r.resolve(".", file+m[1]))
				default:
					report(n, "link", m[1], r.resolve(path.Dir(file), m[1]))
				}
			}
		}
		for _, m := range gitRef.FindAllStringSubmatch(refs, -1) {
			if r.inCommit != nil {
				report(n, "reference", m[2]+":"+m[3], r.inCommit(m[2], m[3]))
			}
		}
		// A path cited in a commit is not a path of the tree.
		refs = gitRef.ReplaceAllString(refs, "$1")
		for _, m := range docsRef.FindAllStringSubmatch(refs, -1) {
			report(n, "reference", m[2]+m[3], r.resolve(".", m[2]+m[3]))
		}
		for _, m := range mdName.FindAllStringSubmatch(refs, -1) {
			if !r.mdNames[m[2]] {
				report(n, "document", m[2], errors.New("no file of that name in the repository"))
			}
		}
	}
	return problems
}

func isExternal(target string) bool {
	for _, scheme := range []string{"http://", "https://", "mailto:"} {
		if strings.HasPrefix(target, scheme) {
			return true
		}
	}
	return false
}

// resolve checks that target, relative to dir, exists, and that its
// anchor, if any, is a heading of that Markdown file.
func (r *resolver) resolve(dir, target string) error {
	p, anchor, _ := strings.Cut(target, "#")
	p = path.Clean(path.Join(dir, p))
	if p == ".." || strings.HasPrefix(p, "../") {
		return fmt.Errorf("outside the repository")
	}
	st, err := fs.Stat(r.fsys, p)
	if err != nil {
		return errors.New("does not exist")
	}
	if strings.HasSuffix(target, "/") && !st.IsDir() {
		return errors.New("is not a directory")
	}
	if anchor == "" {
		return nil
	}
	anchors, err := r.anchors(p)
	if err != nil {
		return err
	}
	if !slices.Contains(anchors, anchor) {
		return fmt.Errorf("no heading #%s in %s", anchor, p)
	}
	return nil
}

// anchors returns the anchors GitHub gives the headings of a Markdown
// file: each heading's slug, with -1, -2… added to repeats.
func (r *resolver) anchors(p string) ([]string, error) {
	if a, ok := r.headings[p]; ok {
		return a, nil
	}
	b, err := fs.ReadFile(r.fsys, p)
	if err != nil {
		return nil, err
	}
	var anchors []string
	seen := map[string]int{}
	fenced := false
	for _, line := range strings.Split(string(b), "\n") {
		if t := strings.TrimSpace(line); strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
			fenced = !fenced
			continue
		}
		m := mdHeading.FindStringSubmatch(line)
		if fenced || m == nil {
			continue
		}
		s := slug(m[2])
		if k := seen[s]; k > 0 {
			anchors = append(anchors, fmt.Sprintf("%s-%d", s, k))
		} else {
			anchors = append(anchors, s)
		}
		seen[s]++
	}
	r.headings[p] = anchors
	return anchors, nil
}

// slug is GitHub's anchor for a heading: link targets dropped, lower case,
// every character but letters, digits, '-', '_' and spaces removed, spaces
// turned into '-'.
func slug(heading string) string {
	heading = headLink.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, c := range strings.ToLower(heading) {
		switch {
		case c == ' ':
			b.WriteRune('-')
		case c == '-' || c == '_' || unicode.IsLetter(c) || unicode.IsDigit(c):
			b.WriteRune(c)
		}
	}
	return b.String()
}

// gitHistory returns a check that the repository at dir holds p in
// commit, and that commit is in the history of HEAD; or nil when it
// cannot tell: no git, or a shallow clone without that history.
func gitHistory(dir string) func(commit, p string) error {
	out, err := exec.Command("git", "-C", dir, "rev-parse", "--is-shallow-repository").Output()
	if err != nil || strings.TrimSpace(string(out)) != "false" {
		return nil
	}
	return func(commit, p string) error {
		// --is-ancestor exits 1 for a commit off HEAD's history, 128 for
		// a name that is no commit.
		err := exec.Command("git", "-C", dir, "merge-base", "--is-ancestor", commit, "HEAD").Run()
		var exit *exec.ExitError
		switch {
		case errors.As(err, &exit) && exit.ExitCode() == 1:
			return fmt.Errorf("commit %s is not in the history of HEAD", commit)
		case err != nil:
			return fmt.Errorf("no commit %s in the repository", commit)
		}
		if exec.Command("git", "-C", dir, "cat-file", "-e", commit+":"+p).Run() != nil {
			return fmt.Errorf("not in commit %s", commit)
		}
		return nil
	}
}
