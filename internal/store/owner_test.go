package store_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// sqlOnTable matches a statement that names an ff_* table where a
// statement would: after FROM, JOIN, INTO, UPDATE, TABLE, or in VACUUM and
// ANALYZE lists.
var sqlOnTable = regexp.MustCompile(`(?is)\b(FROM|JOIN|INTO|UPDATE|TABLE|VACUUM|ANALYZE)\b[\s(A-Z,]*\bff_[a-z_]+`)

// No package but the store holds SQL against ff_* tables (tests and
// migrations aside): every other package calls the store's functions.
// The check reads the string literals of every non-test Go file of the
// module, so a statement cannot hide in a comment-free corner.
func TestOnlyTheStoreHoldsSQL(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	offenders := map[string][]string{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			// The River peer is another module; migrations are SQL by
			// design; testdata holds fuzz corpora.
			if rel == "bench/peers" || rel == "migrations" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		pkg := filepath.ToSlash(filepath.Dir(rel))
		if pkg == "internal/store" {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil {
				s = lit.Value
			}
			if m := sqlOnTable.FindString(s); m != "" {
				offenders[pkg] = append(offenders[pkg], fset.Position(lit.Pos()).String())
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for pkg, where := range offenders {
		t.Errorf("%s holds SQL against ff_* tables; move it into internal/store:\n\t%s", pkg, strings.Join(where, "\n\t"))
	}
}
