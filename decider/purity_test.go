package decider_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestPurity enforces the decider's contract (design.md: "decider imports no I/O at
// all", invariant 1): in the package's non-test files there is no I/O import, no clock
// read, no unseeded or global randomness, no init function, no package-level variable
// other than sentinel errors, and no range over a map (whose order is random).
func TestPurity(t *testing.T) {
	forbiddenImports := map[string]bool{
		"os": true, "os/exec": true, "io/ioutil": true, "io/fs": true, "net": true, "net/http": true,
		"syscall": true, "unsafe": true, "math/rand": true, "crypto/rand": true, "log": true,
		"log/slog": true, "sync": true, "sync/atomic": true, "runtime": true, "reflect": true,
	}
	forbiddenCalls := map[string]bool{
		"time.Now": true, "time.Since": true, "time.Until": true, "time.Sleep": true, "time.After": true,
		"time.Tick": true, "time.NewTimer": true, "time.NewTicker": true, "time.AfterFunc": true,
		"rand.Int": true, "rand.IntN": true, "rand.Int64": true, "rand.Int64N": true, "rand.Uint64": true,
		"rand.Float64": true, "rand.Perm": true, "rand.Shuffle": true, "rand.N": true, "rand.Uint32": true,
	}
	files, _ := filepath.Glob("*.go")
	checked := 0
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		checked++
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if forbiddenImports[p] {
				t.Errorf("%s imports %q", fset.Position(imp.Pos()), p)
			}
		}
		// Map types declared in the file, to catch ranging over them.
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if d.Name.Name == "init" && d.Recv == nil {
					t.Errorf("%s: init function", fset.Position(d.Pos()))
				}
			case *ast.GenDecl:
				if d.Tok != token.VAR {
					continue
				}
				for _, spec := range d.Specs {
					vs := spec.(*ast.ValueSpec)
					for i, name := range vs.Names {
						if name.Name == "_" {
							continue
						}
						if !strings.HasPrefix(name.Name, "Err") || i >= len(vs.Values) || !isErrorsNew(vs.Values[i]) {
							t.Errorf("%s: package-level variable %s (only errors.New sentinels are allowed)", fset.Position(name.Pos()), name.Name)
						}
					}
				}
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.CallExpr:
				if sel, ok := x.Fun.(*ast.SelectorExpr); ok {
					if pkg, ok := sel.X.(*ast.Ident); ok && forbiddenCalls[pkg.Name+"."+sel.Sel.Name] {
						t.Errorf("%s: call to %s.%s", fset.Position(x.Pos()), pkg.Name, sel.Sel.Name)
					}
				}
			case *ast.RangeStmt:
				if isMapExpr(f, x.X) {
					t.Errorf("%s: range over a map", fset.Position(x.Pos()))
				}
			}
			return true
		})
	}
	if checked < 10 {
		t.Fatalf("only %d files checked", checked)
	}
}

func isErrorsNew(e ast.Expr) bool {
	call, ok := e.(*ast.CallExpr)
	if !ok {
		return false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	return ok && pkg.Name == "errors" && sel.Sel.Name == "New"
}

// isMapExpr recognizes ranging over a variable declared in the same function with a
// map type or a map literal: a syntactic check, enough for this small package, where
// the only maps are local sets built by CheckPools.
func isMapExpr(f *ast.File, e ast.Expr) bool {
	id, ok := e.(*ast.Ident)
	if !ok || id.Obj == nil {
		return false
	}
	switch d := id.Obj.Decl.(type) {
	case *ast.AssignStmt:
		for _, rhs := range d.Rhs {
			if cl, ok := rhs.(*ast.CompositeLit); ok {
				if _, ok := cl.Type.(*ast.MapType); ok {
					return true
				}
			}
			if call, ok := rhs.(*ast.CallExpr); ok {
				if fn, ok := call.Fun.(*ast.Ident); ok && fn.Name == "make" && len(call.Args) > 0 {
					if _, ok := call.Args[0].(*ast.MapType); ok {
						return true
					}
				}
			}
		}
	case *ast.ValueSpec:
		_, ok := d.Type.(*ast.MapType)
		return ok
	}
	return false
}
