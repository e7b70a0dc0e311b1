package store

import (
	"context"
	"iter"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/flowfabric/ffd/ffdtype"
)

// The keys of controlled lanes on a distributed Postgres, apart from the
// claim (key_routed.go): what lists read of them, the keys a create
// records, and the sweep that forgets idle ones. ff_key is distributed
// by lane there, one shard apart from ff_execution's (migration 00043;
// a reference table before, whose every write locked the whole table
// until commit): a statement joins neither with the other.

// keyStat is what runs and is due of one key of a lane.
type keyStat struct{ running, due int }

// routedKeyStats counts the running and due executions of lanes' keys
// (the empty key for the unkeyed), and of each lane as a whole.
func routedKeyStats(ctx context.Context, db DB, lanes []string) (map[[2]string]keyStat, map[string]keyStat, error) {
	rows, err := db.Query(ctx, `SELECT lane, coalesce(concurrency_key, ''),
			count(*) FILTER (WHERE state = 'running'), count(*) FILTER (WHERE state = 'pending' AND run_at <= now())
		FROM ff_execution WHERE lane = ANY($1::text[]) AND state IN ('pending', 'running') GROUP BY 1, 2`, lanes)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	keys, totals := map[[2]string]keyStat{}, map[string]keyStat{}
	for rows.Next() {
		var lane, key string
		var s keyStat
		if err := rows.Scan(&lane, &key, &s.running, &s.due); err != nil {
			return nil, nil, err
		}
		keys[[2]string{lane, key}] = s
		t := totals[lane]
		t.running, t.due = t.running+s.running, t.due+s.due
		totals[lane] = t
	}
	return keys, totals, rows.Err()
}

// routedKeyRows reads the keys where says (its condition, order and limit),
// as ListKeys shows them but without counts.
func routedKeyRows(ctx context.Context, db DB, where string, args ...any) ([]*ffdtype.Key, []rateState, error) {
	rows, err := db.Query(ctx, `SELECT lane, key, coalesce(max_running, 0), rate_count,
			(extract(epoch FROM rate_interval) * 1e6)::bigint, rate_burst, tokens, tokens_at, weight, configured,
			nullif(served_at, '-infinity'), CASE WHEN strict THEN 'strict' ELSE 'fair' END
		FROM ff_key WHERE `+where, args...)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	var ks []*ffdtype.Key
	var rates []rateState
	for rows.Next() {
		var k ffdtype.Key
		var r rateState
		if err := rows.Scan(&k.Lane, &k.Key, &k.MaxRunning, &r.count, &r.perUS, &r.burst, &r.tokens, &r.at,
			&k.Weight, &k.Configured, &k.ServedAt, &k.Order); err != nil {
			return nil, nil, err
		}
		if r.count != nil {
			k.Rate = &ffdtype.Rate{Count: *r.count, Per: time.Duration(*r.perUS) * time.Microsecond, Burst: *r.burst}
		}
		ks, rates = append(ks, &k), append(rates, r)
	}
	return ks, rates, rows.Err()
}

// fillKey sets what a key's stats and bucket say of it.
func fillKey(k *ffdtype.Key, r rateState, s keyStat, now time.Time) {
	k.Running, k.Due = s.running, s.due
	if k.Key == "" {
		k.Running = 0
	}
	if t, ok := r.tokensAt(now); ok {
		k.Tokens = t
	}
	k.Held = k.Due > 0 && ((k.MaxRunning > 0 && k.Running >= k.MaxRunning) || (k.Rate != nil && k.Tokens < 1))
}

// listKeysRouted reads keys of lane in key order, after *after when set,
// only *key when set, at most limit, with what runs and is due of each.
// Its statements read ff_key and ff_execution apart (a distributed
// Postgres joins neither with the other), so it serves both kinds of
// Postgres.
func listKeysRouted(ctx context.Context, db DB, lane string, after, key *string, limit int) ([]*ffdtype.Key, error) {
	var now time.Time
	if err := db.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return nil, err
	}
	ks, rates, err := routedKeyRows(ctx, db, `lane = $1 AND ($2::text IS NULL OR key > $2) AND ($3::text IS NULL OR key = $3)
		ORDER BY lane, key LIMIT $4`, lane, after, key, limit)
	if err != nil {
		return nil, err
	}
	stats, _, err := routedKeyStats(ctx, db, []string{lane})
	if err != nil {
		return nil, err
	}
	out := ks[:0]
	for i, k := range ks {
		s, live := stats[[2]string{lane, k.Key}]
		if k.Key == "" && !live && !k.Configured {
			continue // no unkeyed work to take turns, and no weight set for it
		}
		fillKey(k, rates[i], s, now)
		out = append(out, k)
	}
	return out, nil
}

// laneBuckets reads the rate buckets of the lanes' rooms (only: that
// lane's), by lane. A read of its own: on a distributed Postgres
// ff_lane_room lies on one node and ff_lane on every node.
func laneBuckets(ctx context.Context, db DB, only *string) (map[string]rateState, error) {
	rows, err := db.Query(ctx, `SELECT lane, tokens, tokens_at FROM ff_lane_room WHERE $1::text IS NULL OR lane = $1`, only)
	if err != nil {
		return nil, err
	}
	out := map[string]rateState{}
	var lane string
	var r rateState
	_, err = pgx.ForEachRow(rows, []any{&lane, &r.tokens, &r.at}, func() error {
		out[lane] = r
		r = rateState{}
		return nil
	})
	return out, err
}

// listLanesRouted lists lanes under control ($1: only that one), with
// what runs and is due in each, and, for keyed lanes, how many keys hold
// due executions back (at their running limit or out of rate tokens) and
// how many due executions wait behind them; read as listKeysRouted reads,
// on either kind of Postgres.
func listLanesRouted(ctx context.Context, db DB, only *string) ([]*ffdtype.Lane, error) {
	var now time.Time
	if err := db.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return nil, err
	}
	buckets, err := laneBuckets(ctx, db, only)
	if err != nil {
		return nil, err
	}
	rows, err := db.Query(ctx, `SELECT lane, paused, coalesce(max_running, 0), rate_count,
			(extract(epoch FROM rate_interval) * 1e6)::bigint, rate_burst, keyed, updated_at
		FROM ff_lane WHERE $1::text IS NULL OR lane = $1 ORDER BY lane`, only)
	if err != nil {
		return nil, err
	}
	var ls []*ffdtype.Lane
	var names []string
	for rows.Next() {
		var l ffdtype.Lane
		var r rateState
		if err := rows.Scan(&l.Name, &l.Paused, &l.MaxRunning, &r.count, &r.perUS, &r.burst, &l.Keyed, &l.UpdatedAt); err != nil {
			rows.Close()
			return nil, err
		}
		if r.count != nil {
			b := buckets[l.Name]
			r.tokens, r.at = b.tokens, b.at
			l.Rate = &ffdtype.Rate{Count: *r.count, Per: time.Duration(*r.perUS) * time.Microsecond, Burst: *r.burst}
			l.Tokens, _ = r.tokensAt(now)
		}
		ls, names = append(ls, &l), append(names, l.Name)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(ls) == 0 {
		return ls, nil
	}
	stats, totals, err := routedKeyStats(ctx, db, names)
	if err != nil {
		return nil, err
	}
	ks, rates, err := routedKeyRows(ctx, db, `lane = ANY($1::text[]) AND key <> '' ORDER BY lane, key`, names)
	if err != nil {
		return nil, err
	}
	byLane := map[string]*ffdtype.Lane{}
	for _, l := range ls {
		byLane[l.Name] = l
		l.Running, l.Due = totals[l.Name].running, totals[l.Name].due
	}
	for i, k := range ks {
		fillKey(k, rates[i], stats[[2]string{k.Lane, k.Key}], now)
		l := byLane[k.Lane]
		l.Keys++
		if k.Held {
			l.KeysHeld++
			l.WaitingHeld += k.Due
		}
	}
	return ls, nil
}

// ensureKeysRouted is EnsureKeys on a distributed Postgres, where a
// statement that writes ff_lane (a reference table) or ff_key (another
// colocation than the rows it is read beside) takes no data-modifying CTE:
// the keys already known locked FOR KEY SHARE, then a row for each lane
// not yet keyed and each key missing or whose limit changes.
func ensureKeysRouted(ctx context.Context, db DB, lanes, keys []string, lims []int32) (map[[2]string]bool, error) {
	type want struct {
		lane, key string
		lim       int32
	}
	wants := map[[2]string]want{}
	for i := range keys {
		w := want{lanes[i], keys[i], lims[i]}
		if old, ok := wants[[2]string{w.lane, w.key}]; !ok || w.lim > old.lim {
			wants[[2]string{w.lane, w.key}] = w
		}
		if _, ok := wants[[2]string{w.lane, ""}]; !ok {
			wants[[2]string{w.lane, ""}] = want{lane: w.lane}
		}
	}
	var ls, ks []string
	for k := range wants {
		ls, ks = append(ls, k[0]), append(ks, k[1])
	}
	held, strict, err := heldKeys(ctx, db, ls, ks)
	if err != nil {
		return nil, err
	}
	rows, err := db.Query(ctx, `SELECT lane FROM ff_lane WHERE lane = ANY($1::text[]) AND keyed`, ls)
	if err != nil {
		return nil, err
	}
	keyed, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	b := &pgx.Batch{}
	done := map[string]bool{}
	for _, l := range keyed {
		done[l] = true
	}
	for _, l := range ls {
		if !done[l] {
			done[l] = true
			b.Queue(`INSERT INTO ff_lane (lane, keyed) VALUES ($1, true) ON CONFLICT (lane) DO UPDATE SET keyed = true`, l)
		}
	}
	for k, w := range wants {
		m, ok := held[k]
		if ok && (w.lim == 0 || (m != nil && int32(*m) == w.lim)) {
			continue
		}
		var lim *int32
		if w.lim > 0 {
			lim = &w.lim
		}
		b.Queue(`INSERT INTO ff_key AS f (lane, key, max_running) VALUES ($1, $2, $3)
			ON CONFLICT (lane, key) DO UPDATE SET max_running = coalesce(excluded.max_running, f.max_running)`, w.lane, w.key, lim)
	}
	out := lockStrict(b, strict)
	if b.Len() == 0 {
		return out, nil
	}
	return out, db.SendBatch(ctx, b).Close()
}

// heldKeys locks the known keys of (ls[i], ks[i]) FOR KEY SHARE, in key
// order, and reads their limits, and which of them are strict.
func heldKeys(ctx context.Context, db DB, ls, ks []string) (map[[2]string]*int, [][2]string, error) {
	rows, err := db.Query(ctx, `SELECT k.lane, k.key, k.max_running, k.strict FROM ff_key k
		JOIN unnest($1::text[], $2::text[]) AS w(lane, key) ON k.lane = w.lane AND k.key = w.key
		ORDER BY k.lane, k.key FOR KEY SHARE OF k`, ls, ks)
	if err != nil {
		return nil, nil, err
	}
	held := map[[2]string]*int{}
	var strict [][2]string
	var k [2]string
	var m *int
	var st bool
	_, err = pgx.ForEachRow(rows, []any{&k[0], &k[1], &m, &st}, func() error {
		var lim *int // a copy: the scan may reuse m's target
		if m != nil {
			v := *m
			lim = &v
		}
		held[k] = lim
		if st {
			strict = append(strict, k)
		}
		return nil
	})
	return held, strict, err
}

// lockStrict queues the lock of the strict keys, in key order as
// ensureKeysSQL takes them, and returns them as EnsureKeys wants them.
func lockStrict(b *pgx.Batch, strict [][2]string) map[[2]string]bool {
	out := make(map[[2]string]bool, len(strict))
	if len(strict) == 0 {
		return out
	}
	sl, sk := make([]string, len(strict)), make([]string, len(strict))
	for i, k := range strict {
		sl[i], sk[i] = k[0], k[1]
		out[k] = true
	}
	b.Queue(`SELECT 1 FROM ff_key k JOIN unnest($1::text[], $2::text[]) AS s(lane, key) ON k.lane = s.lane AND k.key = s.key
		WHERE k.strict ORDER BY k.lane, k.key FOR NO KEY UPDATE OF k`, sl, sk)
	return out
}

// forgetIdleKeysRouted is ForgetIdleKeys on a distributed Postgres, where
// the keys it locks are held until commit, and a keyed claim would wait
// for them (and, while ff_key was a reference table, for any write of
// it): so the transaction reads first and locks late, with one statement per lane
// for the locks and one for the deletes (never one per key), and one
// read across the shards for the live keys of every lane. The keys
// that look idle are locked SKIP LOCKED and deleted when they are still
// idle on a read after the locks.
func forgetIdleKeysRouted(ctx context.Context, tx pgx.Tx, limit int) (int, error) {
	if _, err := tx.Exec(ctx, `SET LOCAL citus.multi_shard_modify_mode TO 'sequential'`); err != nil {
		return 0, err
	}
	rows, err := tx.Query(ctx, `SELECT lane, key FROM ff_key WHERE NOT configured AND key <> '' ORDER BY lane, key`)
	if err != nil {
		return 0, err
	}
	known, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([2]string, error) {
		var k [2]string
		return k, r.Scan(&k[0], &k[1])
	})
	if err != nil || len(known) == 0 {
		return 0, err
	}
	var lanes []string
	for lane := range byLane(known) {
		lanes = append(lanes, lane)
	}
	busy, err := liveKeys(ctx, tx, lanes, nil)
	if err != nil {
		return 0, err
	}
	var idle [][2]string
	for _, k := range known {
		if !busy[k] && len(idle) < limit {
			idle = append(idle, k)
		}
	}
	if len(idle) == 0 {
		return 0, nil
	}
	locked, err := lockKeys(ctx, tx, idle)
	if err != nil || len(locked) == 0 {
		return 0, err
	}
	keys := make([]string, len(locked))
	for i, k := range locked {
		keys[i] = k[1]
	}
	// After the locks: a creator holding a key committed its rows first.
	if busy, err = liveKeys(ctx, tx, lanes, keys); err != nil {
		return 0, err
	}
	gone := slices.DeleteFunc(locked, func(k [2]string) bool { return busy[k] })
	if len(gone) == 0 {
		return 0, nil
	}
	n := 0
	b := &pgx.Batch{}
	for lane, keys := range byLane(gone) {
		b.Queue(`DELETE FROM ff_key WHERE lane = $1 AND key = ANY($2::text[])`, lane, keys).Exec(func(tag pgconn.CommandTag) error {
			n += int(tag.RowsAffected())
			return nil
		})
	}
	return n, tx.SendBatch(ctx, b).Close()
}

// byLane groups keys (lane, key), sorted, by lane, in lane order.
func byLane(keys [][2]string) iter.Seq2[string, []string] {
	return func(yield func(string, []string) bool) {
		for i := 0; i < len(keys); {
			j := i
			var ks []string
			for ; j < len(keys) && keys[j][0] == keys[i][0]; j++ {
				ks = append(ks, keys[j][1])
			}
			if !yield(keys[i][0], ks) {
				return
			}
			i = j
		}
	}
}

// liveKeys are the (lane, key) pairs of lanes that have a live
// execution, of keys only when keys is not nil: one read across the
// shards, however many lanes.
func liveKeys(ctx context.Context, tx pgx.Tx, lanes, keys []string) (map[[2]string]bool, error) {
	return keySet(tx.Query(ctx, `SELECT DISTINCT lane, concurrency_key FROM ff_execution
		WHERE lane = ANY($1::text[]) AND concurrency_key IS NOT NULL AND ($2::text[] IS NULL OR concurrency_key = ANY($2::text[]))
			AND state IN ('blocked', 'pending', 'running')`, lanes, keys))
}

// lockKeys locks those of keys (lane, key), sorted, still unconfigured,
// in key order, skipping those another transaction holds; it returns
// them sorted.
func lockKeys(ctx context.Context, tx pgx.Tx, keys [][2]string) ([][2]string, error) {
	var locked [][2]string
	b := &pgx.Batch{}
	for lane, ks := range byLane(keys) {
		b.Queue(`SELECT key FROM ff_key WHERE lane = $1 AND key = ANY($2::text[]) AND NOT configured
			ORDER BY key FOR UPDATE SKIP LOCKED`, lane, ks).Query(func(rows pgx.Rows) error {
			var k string
			_, err := pgx.ForEachRow(rows, []any{&k}, func() error {
				locked = append(locked, [2]string{lane, k})
				return nil
			})
			return err
		})
	}
	return locked, tx.SendBatch(ctx, b).Close()
}
