package store_test

import (
	"testing"

	"github.com/flowfabric/ffd/internal/store"
)

// A keyed claim's turn updates the keys it served by their primary key,
// whatever the statistics of ff_key say. With the keys of every lane in
// the table and its statistics fresh, a generic plan chose a hash join
// over a sequential scan of ff_key: every claim then read every key of
// every lane, and every dead version of them (a key's row is updated at
// each of its turns, never as a HOT update: its turn index holds the
// column). The settings a controlled claim runs with (store.HotPlansSQL)
// rule that out.
func TestKeyTurnPlanUpdatesKeysByKey(t *testing.T) {
	t.Parallel()
	b := newPlanBench(t)
	b.exec(`INSERT INTO ff_key (lane, key) SELECT 'many', 'k' || i FROM generate_series(1, 1000) i`)
	b.exec(`INSERT INTO ff_key (lane, key) VALUES ('hot', 'hot')`)
	b.exec(`ANALYZE ff_key`)
	for _, lane := range []string{"hot", "many"} {
		plan, raw := b.explain(store.HotPlansSQL, `PREPARE planned(text, text[], int) AS `+store.KeyTurnSQL,
			`EXECUTE planned('`+lane+`', '{}', 50)`)
		update := plan.find(func(n *planNode) bool { return n.NodeType == "ModifyTable" })
		if update == nil {
			t.Fatalf("lane %s: no update in the plan: %s", lane, raw)
		}
		if update.find(func(n *planNode) bool { return n.NodeType == "Seq Scan" && n.RelationName == "ff_key" }) != nil ||
			update.find(func(n *planNode) bool { return n.IndexName == "ff_key_pkey" }) == nil {
			t.Errorf("lane %s: want the keys updated through ff_key_pkey, no scan of ff_key; got %s", lane, raw)
		}
	}
}
