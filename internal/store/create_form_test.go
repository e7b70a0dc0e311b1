package store

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// The VALUES form of the batch insert gives each row its own parameters,
// every one of them used, in insertInput's order and types, its
// capabilities as a text[]; and it writes the columns the arrays' form
// writes.
func TestInsertValuesSQL(t *testing.T) {
	t.Parallel()
	param := regexp.MustCompile(`\$(\d+)::([a-z0-9\[\]]+)`)
	for _, n := range []int{1, 2, 5, CopyThreshold - 1} {
		sql := insertValuesSQL(n)
		if !strings.HasPrefix(sql, insertManyColumns) || strings.Contains(sql, "SELECT jsonb_array_elements_text") {
			t.Fatalf("n=%d: not the batch insert's columns, or a subquery Citus refuses in VALUES:\n%s", n, sql)
		}
		if rows := strings.Count(sql, "\n("); rows != n-1 || !strings.Contains(sql, "VALUES (") {
			t.Fatalf("n=%d: %d VALUES rows after the first, want %d", n, rows, n-1)
		}
		seen := map[int]string{}
		for _, m := range param.FindAllStringSubmatch(sql, -1) {
			var k int
			fmt.Sscan(m[1], &k)
			if typ, ok := seen[k]; ok && typ != m[2] {
				t.Fatalf("n=%d: $%d cast to %s and to %s", n, k, typ, m[2])
			}
			seen[k] = m[2]
		}
		if len(seen) != n*len(insertInput) {
			t.Fatalf("n=%d: %d parameters, want %d", n, len(seen), n*len(insertInput))
		}
		for k := 1; k <= n*len(insertInput); k++ {
			in := insertInput[(k-1)%len(insertInput)]
			want := in.typ
			if in.name == "caps" {
				want = "text[]"
			}
			if seen[k] != want {
				t.Fatalf("n=%d: $%d (%s of row %d) is a %q, want %q", n, k, in.name, (k-1)/len(insertInput)+1, seen[k], want)
			}
		}
	}
}
