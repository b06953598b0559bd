package scripts

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"

	"gotest.tools/v3/assert"
)

// TestE2ETestsRunInParallelOrSayWhy keeps the convention of
// testenv/README.md: every test of the end-to-end package starts with
// t.Parallel() (it gets a cluster of its own from newEnv), or starts with a
// comment "Runs alone" saying why it must not share the machine.
func TestE2ETestsRunInParallelOrSayWhy(t *testing.T) {
	files, err := filepath.Glob("../testenv/e2e/*_test.go")
	assert.NilError(t, err)
	assert.Assert(t, len(files) > 0)
	fset := token.NewFileSet()
	tests := 0
	for _, path := range files {
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		assert.NilError(t, err)
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Test") || fn.Name.Name == "TestMain" || fn.Body == nil {
				continue
			}
			tests++
			if startsParallel(fn.Body) || saysWhyAlone(f, fn.Body) {
				continue
			}
			t.Errorf("%s: %s neither starts with t.Parallel() nor with a comment \"Runs alone …\" saying why (see testenv/README.md)",
				fset.Position(fn.Pos()), fn.Name.Name)
		}
	}
	t.Logf("%d tests checked", tests)
}

func startsParallel(body *ast.BlockStmt) bool {
	if len(body.List) == 0 {
		return false
	}
	call, ok := body.List[0].(*ast.ExprStmt)
	if !ok {
		return false
	}
	c, ok := call.X.(*ast.CallExpr)
	if !ok {
		return false
	}
	sel, ok := c.Fun.(*ast.SelectorExpr)
	return ok && sel.Sel.Name == "Parallel" && len(c.Args) == 0
}

// saysWhyAlone: a comment "Runs alone" before the body's first statement.
func saysWhyAlone(f *ast.File, body *ast.BlockStmt) bool {
	end := body.Rbrace
	if len(body.List) > 0 {
		end = body.List[0].Pos()
	}
	for _, cg := range f.Comments {
		if cg.Pos() > body.Lbrace && cg.End() < end && strings.HasPrefix(cg.Text(), "Runs alone") {
			return true
		}
	}
	return false
}
