package agent

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// stateMethodMax is the most lines a method of the owner loop's own type
// may have: it orchestrates (the run loop, the passes, decide, shutdown,
// the entry points of its inputs), and what each part does is a method of
// that part.
const stateMethodMax = 60

// stateMethodsMax is the most methods the owner loop's own type may have:
// the run loop, the passes, decide and what carries a decision out,
// shutdown, and the entry points of its inputs. A rule of one part is a
// method of that part.
const stateMethodsMax = 45

// agentReachMax is the most places the loop's methods may reach through
// the Agent (s.a): the loop is handed its ports, its caches and its log
// when it is built, and reaches the Agent only for what it starts (the
// writers, the readiness it signals) and the inputs it selects on.
const agentReachMax = 40

// TestPartsOwnTheirFields reads the package's source and fails when the
// loop's parts stop owning their fields: state embeds a field (whose
// fields anyone may then write as its own); a part's field is written
// (assigned, incremented, deleted, cleared, appended to, its address
// taken, or a method called on it), through the loop or through a
// parameter pointing to the part, or a pointer to a whole part kept in a
// variable, outside a method of that part; a part
// holds the loop, the Agent or another part; the loop has more than
// stateMethodsMax methods, or one longer than stateMethodMax lines; the loop's methods reach through the
// Agent in more than agentReachMax places. There is no list of exceptions: a new field belongs to one part, and whoever
// needs it asks that part.
func TestPartsOwnTheirFields(t *testing.T) {
	fset := token.NewFileSet()
	files := parsePackage(t, fset)
	structs := map[string]*ast.StructType{}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			if ts, ok := n.(*ast.TypeSpec); ok {
				if st, ok := ts.Type.(*ast.StructType); ok {
					structs[ts.Name.Name] = st
				}
			}
			return true
		})
	}
	st := structs["state"]
	if st == nil {
		t.Fatal("no type state in the package")
	}
	// The parts: state's fields whose type is a struct of this package,
	// held by value. partOf maps each field name of state to its type.
	partOf := map[string]string{}
	for _, f := range st.Fields.List {
		if len(f.Names) == 0 {
			t.Errorf("state embeds %s: name the part, so that its fields are reached through it", typeName(f.Type))
			continue
		}
		if id, ok := f.Type.(*ast.Ident); ok && structs[id.Name] != nil {
			for _, n := range f.Names {
				partOf[n.Name] = id.Name
			}
		}
	}
	parts := map[string]bool{}
	for _, p := range partOf {
		parts[p] = true
	}
	fieldsOf := map[string]map[string]bool{}
	for p := range parts {
		fieldsOf[p] = map[string]bool{}
		for _, f := range structs[p].Fields.List {
			if len(f.Names) == 0 {
				t.Errorf("part %s embeds %s", p, typeName(f.Type))
			}
			for _, n := range f.Names {
				fieldsOf[p][n.Name] = true
			}
			held := strings.TrimPrefix(typeName(f.Type), "*")
			if held == "state" || held == "Agent" || parts[held] {
				t.Errorf("part %s holds a %s (%s): a part is handed what it needs, never the whole nor another part", p, typeName(f.Type), f.Names[0].Name)
			}
		}
	}

	// A method with a pointer receiver may change its value: called on a
	// part's field, it writes that field.
	mutators := map[string]map[string]bool{}
	for _, f := range files {
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv != nil {
				if _, ptr := fd.Recv.List[0].Type.(*ast.StarExpr); ptr {
					r := receiverType(fd)
					if mutators[r] == nil {
						mutators[r] = map[string]bool{}
					}
					mutators[r][fd.Name.Name] = true
				}
			}
		}
	}
	fieldType := map[string]map[string]string{}
	for p := range parts {
		fieldType[p] = map[string]string{}
		for _, f := range structs[p].Fields.List {
			for _, n := range f.Names {
				fieldType[p][n.Name] = strings.TrimPrefix(typeName(f.Type), "*")
			}
		}
	}
	o := owners{partOf: partOf, fieldsOf: fieldsOf, fieldType: fieldType, mutators: mutators}

	reach, methods := 0, 0
	for _, f := range files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok {
				continue
			}
			recv := receiverType(fd)
			if recv == "state" {
				methods++
				if n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1; n > stateMethodMax {
					t.Errorf("%s: (*state).%s is %d lines, more than %d", fset.Position(fd.Pos()), fd.Name.Name, n, stateMethodMax)
				}
				reach += agentReaches(fd)
			}
			if fd.Body == nil {
				continue
			}
			for _, w := range o.writes(fd.Body, o.partParams(fd)) {
				if w.part != recv && w.field == "" {
					t.Errorf("%s: %s keeps a pointer to %s, the part %s, in a variable, to write its fields outside that part's methods",
						fset.Position(w.pos), funcName(fd), w.via, w.part)
				} else if w.part != recv {
					t.Errorf("%s: %s writes %s.%s, a field of the part %s, outside that part's methods",
						fset.Position(w.pos), funcName(fd), w.via, w.field, w.part)
				}
			}
		}
	}
	if methods > stateMethodsMax {
		t.Errorf("state has %d methods, more than %d: a method that reads or writes one part, or none, belongs to that part", methods, stateMethodsMax)
	}
	if reach > agentReachMax {
		t.Errorf("the loop's methods reach through the Agent (s.a) in %d places, more than %d: hand the loop, or the part that needs it, the port when it is built", reach, agentReachMax)
	}
}

// agentReaches counts the places the method fd of state reaches through
// its Agent: its receiver's field a, selected.
func agentReaches(fd *ast.FuncDecl) int {
	names := fd.Recv.List[0].Names
	if len(names) == 0 || fd.Body == nil {
		return 0
	}
	recv, n := names[0].Name, 0
	ast.Inspect(fd.Body, func(node ast.Node) bool {
		if x, ok := node.(*ast.SelectorExpr); ok && x.Sel.Name == "a" {
			if id, ok := x.X.(*ast.Ident); ok && id.Name == recv {
				n++
			}
		}
		return true
	})
	return n
}

// parsePackage parses the package's non-test files: the rules hold for the
// code that runs, and a test may set up a part as it likes.
func parsePackage(t *testing.T, fset *token.FileSet) []*ast.File {
	t.Helper()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		t.Fatal("no source files")
	}
	return files
}

type partWrite struct {
	pos        token.Pos
	via, field string // the state field holding the part, the part's field ("": the whole part)
	part       string
}

// owners knows the parts of state and what may change their fields.
type owners struct {
	partOf    map[string]string          // state's field -> its part's type
	fieldsOf  map[string]map[string]bool // part -> its fields
	fieldType map[string]map[string]string
	mutators  map[string]map[string]bool // type -> its pointer-receiver methods
}

// partParams maps the parameters of fd that point to a part (d *desired)
// to that part: a function handed a part may read it, and change it only
// through the part's methods.
func (o owners) partParams(fd *ast.FuncDecl) map[string]string {
	params := map[string]string{}
	for _, f := range fd.Type.Params.List {
		if star, ok := f.Type.(*ast.StarExpr); ok {
			if id, ok := star.X.(*ast.Ident); ok && o.fieldsOf[id.Name] != nil {
				for _, n := range f.Names {
					params[n.Name] = id.Name
				}
			}
		}
	}
	return params
}

// writes finds in body the writes to a part's field reached through
// the part's name in state (x.sched.dirty[ip] = true), through a
// parameter pointing to a part (params: d.rejected[key] = true), or, in a
// method of the part, through its receiver (that write is the part's own;
// it is returned with the part as the writer). A method called on a
// part's field counts as a write: it may change what the part owns.
func (o owners) writes(body ast.Node, params map[string]string) []partWrite {
	var out []partWrite
	partField := func(e ast.Expr) (partWrite, bool) {
		x, ok := e.(*ast.SelectorExpr)
		if !ok {
			return partWrite{}, false
		}
		var via, p string
		switch inner := x.X.(type) {
		case *ast.SelectorExpr:
			via, p = inner.Sel.Name, o.partOf[inner.Sel.Name]
		case *ast.Ident:
			via, p = inner.Name, params[inner.Name]
		}
		if p == "" || !o.fieldsOf[p][x.Sel.Name] {
			return partWrite{}, false
		}
		return partWrite{x.Pos(), via, x.Sel.Name, p}, true
	}
	target := func(e ast.Expr) {
		for {
			switch x := e.(type) {
			case *ast.IndexExpr:
				e = x.X
				continue
			case *ast.StarExpr:
				e = x.X
				continue
			case *ast.ParenExpr:
				e = x.X
				continue
			case *ast.SelectorExpr:
				if w, ok := partField(x); ok {
					out = append(out, w)
					return
				}
				e = x.X
				continue
			}
			return
		}
	}
	ast.Inspect(body, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.AssignStmt:
			if x.Tok != token.DEFINE {
				for _, l := range x.Lhs {
					target(l)
				}
			}
			// c := &s.conflicts keeps a pointer to a whole part, through
			// which its fields are then written as c.probing[ip] = p: the
			// pointer is taken to write, wherever the writes are.
			for _, r := range x.Rhs {
				if u, ok := r.(*ast.UnaryExpr); ok && u.Op == token.AND {
					if sel, ok := u.X.(*ast.SelectorExpr); ok {
						if p, ok := o.partOf[sel.Sel.Name]; ok {
							out = append(out, partWrite{u.Pos(), sel.Sel.Name, "", p})
						}
					}
				}
			}
		case *ast.IncDecStmt:
			target(x.X)
		case *ast.UnaryExpr:
			if x.Op == token.AND {
				target(x.X)
			}
		case *ast.CallExpr:
			if id, ok := x.Fun.(*ast.Ident); ok && (id.Name == "delete" || id.Name == "clear") && len(x.Args) > 0 {
				target(x.Args[0])
			}
			if sel, ok := x.Fun.(*ast.SelectorExpr); ok {
				// x.part.field.method(), a method that may change the field.
				if w, ok := partField(sel.X); ok && o.mutators[o.fieldType[w.part][w.field]][sel.Sel.Name] {
					out = append(out, w)
				}
			}
		}
		return true
	})
	return out
}

func receiverType(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return ""
	}
	return strings.TrimPrefix(typeName(fd.Recv.List[0].Type), "*")
}

func funcName(fd *ast.FuncDecl) string {
	if r := receiverType(fd); r != "" {
		return fmt.Sprintf("(%s).%s", r, fd.Name.Name)
	}
	return fd.Name.Name
}

func typeName(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.Ident:
		return x.Name
	case *ast.StarExpr:
		return "*" + typeName(x.X)
	case *ast.SelectorExpr:
		return typeName(x.X) + "." + x.Sel.Name
	case *ast.ArrayType:
		return "[]" + typeName(x.Elt)
	case *ast.MapType:
		return "map[" + typeName(x.Key) + "]" + typeName(x.Value)
	}
	return fmt.Sprintf("%T", e)
}
