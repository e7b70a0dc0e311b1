package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/flowfabric/ffd/ffdtype"
)

// tokensAt is the SQL expression of the rate tokens a row x of ff_key
// holds at time t: what was left at tokens_at plus what the rate has
// added since, at most the burst; a bucket never used is full.
// Meaningful only when x.rate_count is set.
func tokensAt(x, t string) string { return bucketAt(x, x, t) }

// bucketAt is tokensAt of a rate whose settings are row r's and whose
// bucket is row b's: a lane's settings are in ff_lane, its bucket in
// ff_lane_room.
func bucketAt(r, b, t string) string {
	return `least(` + r + `.rate_burst::float8, coalesce(` + b + `.tokens + greatest(0, extract(epoch FROM ` + t + ` - ` + b + `.tokens_at))::float8
		* ` + r + `.rate_count / extract(epoch FROM ` + r + `.rate_interval)::float8, ` + r + `.rate_burst::float8))`
}

// dueFilter is the claim's test of a pending row e of lane $1, with the
// claimer's capabilities $2: due, runnable by the claimer, not past its
// deadline.
const dueFilter = `e.state = 'pending' AND e.lane = $1 AND e.run_at <= now()
	AND (e.required_capabilities = '{}' OR e.required_capabilities <@ $2::text[])
	AND (e.deadline_at IS NULL OR e.deadline_at > now())`

// keyRunningSQL counts the running executions of key k.key in lane $1.
// It reads the key's live rows (blocked and running) and counts the
// running ones, rather than asking for state = 'running' outright: that
// would let the planner, when its statistics saw few running rows (a
// table filled since the last ANALYZE), read the lease-expiry index,
// which holds every running execution of every lane, once per key (4.6
// of a claim's 4.8 ms at 100 running, auto_explain). This form only the
// key's own index (ff_execution_live_keyed) can serve.
const keyRunningSQL = `(SELECT count(*) FILTER (WHERE r.state = 'running') FROM ff_execution r
	WHERE r.state IN ('blocked', 'running') AND r.lane = $1 AND r.concurrency_key = k.key)`

// keyDueSQL says key k.key of lane $1 has a due execution the claimer can
// run (the empty key stands for the lane's unkeyed executions).
var keyDueSQL = `CASE WHEN k.key = ''
	THEN ` + dueExists(`e.concurrency_key IS NULL`, "") + `
	ELSE ` + dueExists(`e.concurrency_key = k.key`, "") + ` END`

// dueExists says a due row of lane $1 passing test exists, in a form
// only a claim index can serve: the first row in that index's order
// (lead: its columns between the lane and the claim order, "" for
// none). As EXISTS, with statistics taken while the table held another
// mix of rows (another lane's unkeyed work, say), the planner expected a
// match within a few rows of a sequential scan and read the whole table
// where none was (10-27 ms a keyed claim at 20,000 rows; auto_explain).
// In index order a sequential scan must sort every match first, which it
// never prices below the index.
func dueExists(test, lead string) string {
	return `coalesce((SELECT true FROM ff_execution e WHERE ` + dueFilter + ` AND ` + test + `
		ORDER BY ` + lead + `e.priority DESC, e.run_at, e.execution_id LIMIT 1), false)`
}

// turnKeysSetting is the transaction-local setting by which the turn
// statement hands the claim statement the keys it locked. The claim runs
// in the same pipelined round trip, so it cannot take them as a
// parameter; marking each key's row instead (a token column, until
// migration 00037) wrote one more index entry per key served and made
// the claim read an index of every claim's marks.
const turnKeysSetting = "ffd.turn_keys"

// keyTurnSQL is a keyed claim's first statement: it locks the keys whose
// turn it is, least recently served first, as many as the claim can
// serve ($3 slots, each key offering what is left of its turn: its weight
// less what it took in the turn so far), skipping keys another claim
// holds (SKIP LOCKED: claims of other keys go on), keys at their running
// limit and keys out of rate tokens (so a key holding work never blocks
// the lane behind it), keys with nothing due, and every key of a paused
// lane. It hands them to the claim statement (turnKeysSetting) and
// counts each key's share of the slots (up to what is left of its turn,
// after the shares of the keys before it) into its turn: a key whose
// turn that uses up moves to the back of the turn order, in the order the
// keys had (this statement's time plus as many microseconds as the slots
// before it, so the claim statement can still rank them by turn), its
// turn begun anew; a key with turn left keeps its place, so that the next
// claim, of one slot say, serves it again. Weights so hold across claims. A
// share the claim then does not fill (the key had less due, or the lane
// less room) is spent all the same: the turn order moves on rather than
// wait on a key with little to do. The tests of limits here read this
// statement's snapshot, which may be stale; they only spare a lock: the
// claim statement counts again on a snapshot taken after these locks
// were granted.
//
// The keys are updated by their whole primary key taken from the turn,
// with no condition on ff_key of its own, so the planner's one way in is
// the turn first and a key lookup per row, whatever it guesses of
// ff_key's size: given f.lane = $1 as well, a guess of one row (a table
// new since the last ANALYZE) made it read the whole lane and rescan the
// turn once per key (146 ms a claim at 1,000 keys; auto_explain).
var keyTurnSQL = `
WITH s AS MATERIALIZED (
	SELECT $1::text AS lane, t.key, t.used, t.left,
		least(t.share, $3::int - (sum(t.share) OVER (ORDER BY t.served_at, t.key) - t.share)) AS took,
		sum(t.share) OVER (ORDER BY t.served_at, t.key) - t.share AS before, clock.t
	FROM (
		SELECT k.key, least(k.turn_used, k.weight - 1) AS used, k.weight - least(k.turn_used, k.weight - 1) AS left,
			least(k.weight - least(k.turn_used, k.weight - 1), $3::int) AS share, k.served_at
		FROM ff_key k
		WHERE k.lane = $1
			AND NOT EXISTS (SELECT 1 FROM ff_lane p WHERE p.lane = $1 AND p.paused)
			AND (k.max_running IS NULL OR k.max_running > ` + keyRunningSQL + `)
			AND (k.rate_count IS NULL OR ` + tokensAt("k", "clock_timestamp()") + ` >= 1)
			AND ` + keyDueSQL + `
		ORDER BY k.served_at, k.key
		LIMIT $3
		FOR NO KEY UPDATE OF k SKIP LOCKED
	) t, (SELECT clock_timestamp() AS t) clock
), handoff AS (
	SELECT set_config('` + turnKeysSetting + `', coalesce(array_agg(s.key) FILTER (WHERE s.before < $3), '{}')::text, true)
	FROM s
)
UPDATE ff_key f SET
	turn_used = CASE WHEN s.took >= s.left THEN 0 ELSE s.used + s.took END,
	served_at = CASE WHEN s.took >= s.left THEN s.t + s.before * interval '1 microsecond' ELSE f.served_at END
FROM s
WHERE f.lane = s.lane AND f.key = s.key AND s.before < $3
	-- A one-time filter: the handoff runs even when no key's turn came.
	AND (SELECT count(*) FROM handoff) = 1`

// strictHeadSQL is the head of strict key g.key of lane $1: its pending
// execution of the lowest place, due or not. Only the head may start, so
// a retry waiting out its backoff holds its place, and the key's next
// execution starts once the head has ended (or been cancelled). Read by
// ff_execution_key_order, whose entries are only places in strict keys.
const strictHeadSQL = `(SELECT h.execution_id FROM ff_execution h
	WHERE h.state = 'pending' AND h.key_seq IS NOT NULL AND h.lane = $1 AND h.concurrency_key = g.key
	ORDER BY h.key_seq LIMIT 1)`

// laneLockSQL locks a capped or rate-limited lane's room, so that its
// claims count it one after the other (a lane has a row of ff_lane_room
// exactly while it is capped or rate-limited).
const laneLockSQL = `SELECT 1 FROM ff_lane_room WHERE lane = $1 FOR UPDATE`

// controlledClaimSQL claims from a lane under control. It runs after the
// lane's room (when capped or rate-limited) and the keys whose turn it is
// (turnKeysSetting names them) were locked by earlier statements of its
// transaction, so its snapshot sees every claim that held those locks
// before: its counts of running executions, and the tokens it reads, are
// current.
//
// Room: the claim takes at most $3, the lane's cap less what runs in it
// (counted only in a capped lane: the count reads every running row),
// and the lane's whole tokens. Each key (the empty key being the lane's
// unkeyed executions; a lane never keyed has only that group) offers its
// best due executions, by priority then run_at then id, at most its own
// cap less what runs of it and its own whole tokens. The claim takes them
// in rounds: in each round a key offers up to its weight, keys in turn
// order; so every key locked for the claim gets a slot before any gets a
// second, and a key alone gets every slot. It then spends the tokens of
// the lane and of each rate-limited key it took from, at the same clock
// it read them with.
var controlledClaimSQL = `
WITH clock AS MATERIALIZED (SELECT clock_timestamp() AS t),
lane AS MATERIALIZED (
	SELECT l.keyed, l.max_running, l.rate_count, l.rate_interval, l.rate_burst,
		CASE WHEN l.rate_count IS NOT NULL THEN ` + bucketAt("l", "b", "clock.t") + ` END AS tokens
	FROM ff_lane l LEFT JOIN ff_lane_room b ON b.lane = l.lane, clock
	WHERE l.lane = $1 AND NOT l.paused
),
room AS MATERIALIZED (
	SELECT greatest(0, least($3::bigint,
		CASE WHEN lane.max_running IS NOT NULL
			THEN lane.max_running - (SELECT count(*) FROM ff_execution r WHERE r.state = 'running' AND r.lane = $1)
			ELSE $3::bigint END,
		coalesce(floor(lane.tokens)::bigint, $3::bigint))) AS n
	FROM lane
),
groups AS MATERIALIZED (
	SELECT k.key, k.weight, k.served_at, k.strict, k.rate_count IS NOT NULL AS rated, greatest(0, least($3::bigint,
		coalesce(k.max_running - ` + keyRunningSQL + `, $3::bigint),
		coalesce(floor(CASE WHEN k.rate_count IS NOT NULL THEN ` + tokensAt("k", "clock.t") + ` END)::bigint, $3::bigint))) AS room
	FROM unnest(current_setting('` + turnKeysSetting + `', true)::text[]) AS t(key)
		-- A key lookup per handed key, whatever the planner guesses of
		-- the array's length (the LIMIT keeps the lookup from being
		-- pulled up into a join it could run as a scan of ff_key).
		CROSS JOIN LATERAL (SELECT * FROM ff_key f WHERE f.lane = $1 AND f.key = t.key LIMIT 1) k, clock, lane
	WHERE lane.keyed
	UNION ALL
	SELECT '', 1, '-infinity'::timestamptz, false, false, $3::bigint FROM lane WHERE NOT lane.keyed
),
cand AS (
	SELECT c.row_ctid, g.key, g.weight, g.served_at,
		row_number() OVER (PARTITION BY g.key ORDER BY c.priority DESC, c.run_at, c.execution_id) AS rn
	FROM groups g CROSS JOIN LATERAL (
		SELECT e.ctid AS row_ctid, e.priority, e.run_at, e.execution_id
		FROM ff_execution e
		WHERE ` + dueFilter + ` AND e.concurrency_key = g.key
			AND CASE WHEN g.strict THEN e.execution_id = ` + strictHeadSQL + ` ELSE true END
		ORDER BY e.priority DESC, e.run_at, e.execution_id
		LIMIT g.room
		FOR NO KEY UPDATE OF e SKIP LOCKED) c
	WHERE g.key <> ''
	UNION ALL
	SELECT c.row_ctid, g.key, g.weight, g.served_at,
		row_number() OVER (ORDER BY c.priority DESC, c.run_at, c.execution_id) AS rn
	FROM groups g CROSS JOIN LATERAL (
		SELECT e.ctid AS row_ctid, e.priority, e.run_at, e.execution_id
		FROM ff_execution e
		WHERE ` + dueFilter + ` AND e.concurrency_key IS NULL
		ORDER BY e.priority DESC, e.run_at, e.execution_id
		LIMIT least(g.room, (SELECT n FROM room))
		FOR NO KEY UPDATE OF e SKIP LOCKED) c
	WHERE g.key = ''
),
picked AS (
	SELECT row_ctid FROM cand
	ORDER BY ceil(rn::numeric / weight), served_at, key, rn
	LIMIT (SELECT coalesce(max(n), 0) FROM room)
),
claimed AS (
	UPDATE ff_execution e SET ` + leaseStart("$4", "now()", afterNow) + `
	WHERE e.ctid = ANY(ARRAY(SELECT row_ctid FROM picked))
	RETURNING ` + execColumns + `
),
spent_keys AS (
	UPDATE ff_key k SET tokens = ` + tokensAt("k", "clock.t") + ` - s.n, tokens_at = clock.t
	FROM (SELECT c.concurrency_key AS key, count(*) AS n FROM claimed c
		WHERE c.concurrency_key IS NOT NULL GROUP BY 1) s, clock
	-- A one-time filter: no key of the turn has a rate, no read of ff_key.
	WHERE (SELECT bool_or(g.rated) FROM groups g) AND k.lane = $1 AND k.key = s.key AND k.rate_count IS NOT NULL
),
spent_lane AS (
	UPDATE ff_lane_room b SET tokens = ` + bucketAt("lane", "b", "clock.t") + ` - s.n, tokens_at = clock.t
	FROM lane, (SELECT count(*) AS n FROM claimed) s, clock
	WHERE b.lane = $1 AND lane.rate_count IS NOT NULL AND s.n > 0
)
SELECT * FROM claimed ORDER BY priority DESC, run_at, execution_id`

// laneControl is what a claim needs to know of a lane's control row.
type laneControl struct {
	paused, capped, rated, keyed bool
}

// readLaneControl reads lane's control row; ok is false when it has none.
func readLaneControl(ctx context.Context, db DB, lane string) (c laneControl, ok bool, err error) {
	err = db.QueryRow(ctx, `SELECT paused, max_running IS NOT NULL, rate_count IS NOT NULL, keyed FROM ff_lane WHERE lane = $1`, lane).
		Scan(&c.paused, &c.capped, &c.rated, &c.keyed)
	if errors.Is(err, pgx.ErrNoRows) {
		return c, false, nil
	}
	return c, err == nil, err
}

// claimControlled claims from a lane under control on one Postgres, in
// one pipelined transaction (one round trip): the lane's row locked (the
// statement locks only a capped or rate-limited lane's), the keys whose
// turn it is locked (none in a lane never keyed), then the claim. Every
// statement goes each time, so the claim needs no probe of the lane
// first. In a caller's transaction the statements run in it, and the
// locks are held until it ends.
func claimControlled(ctx context.Context, db DB, lane string, caps []string, max int, worker string) ([]*ffdtype.Execution, error) {
	var out []*ffdtype.Execution
	b := &pgx.Batch{}
	if !inCallerTx(db) {
		// Generic plans, for the claim's own transaction only: planning
		// the turn and the claim took 2-4 ms each a call (EXPLAIN), as
		// long as running them; as for the plain claim (claimGeneric).
		b.Queue(hotPlansSQL)
	}
	b.Queue(laneLockSQL, lane)
	b.Queue(keyTurnSQL, lane, caps, max)
	b.Queue(controlledClaimSQL, lane, caps, max, worker).Query(func(rows pgx.Rows) error {
		var err error
		out, err = queryExecutions(rows, nil)
		return err
	})
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return nil, err
	}
	return out, nil
}

// Throttle says why a claim in a controlled lane took less than it asked
// for while executions were due, and when a claim may find more.
type Throttle struct {
	// Held: due executions wait behind the lane's cap or rate, or their
	// keys' limits or rates.
	Held bool
	// Retry is when the first rate token the claim lacked comes (zero:
	// none lacking; a running execution must end first).
	Retry time.Duration
}

// throttleSQL reads, after a claim took less than it asked for from a
// controlled lane, whether due executions wait behind a limit and when
// the lane's or a waiting key's next rate token comes. Whether any due
// execution waits is asked of each claim index in its order: asked as
// one EXISTS over the lane, keyed and unkeyed, it had no index to use
// and read the whole table (17-31 ms a call at 60,000 rows, once per
// short claim; auto_explain).
var throttleSQL = `
WITH clock AS MATERIALIZED (SELECT clock_timestamp() AS t),
lane_wait AS (
	SELECT CASE WHEN l.rate_count IS NOT NULL AND ` + bucketAt("l", "b", "clock.t") + ` < 1
		THEN (1 - ` + bucketAt("l", "b", "clock.t") + `) * extract(epoch FROM l.rate_interval)::float8 / l.rate_count END AS wait
	FROM ff_lane l LEFT JOIN ff_lane_room b ON b.lane = l.lane, clock WHERE l.lane = $1
),
key_wait AS (
	SELECT min((1 - ` + tokensAt("k", "clock.t") + `) * extract(epoch FROM k.rate_interval)::float8 / k.rate_count) AS wait
	FROM ff_key k, clock
	WHERE k.lane = $1 AND k.rate_count IS NOT NULL AND ` + tokensAt("k", "clock.t") + ` < 1
		AND ` + dueExists(`e.concurrency_key = k.key`, "") + `
)
SELECT ` + dueExists(`e.concurrency_key IS NULL`, "") + ` OR ` + dueExists(`e.concurrency_key IS NOT NULL`, "e.concurrency_key, ") + `,
	least((SELECT wait FROM lane_wait), (SELECT wait FROM key_wait))`

// ClaimThrottle reads why a claim from lane (with capabilities caps) took
// less than it asked for; see Throttle.
func ClaimThrottle(ctx context.Context, db DB, lane string, caps []string) (Throttle, error) {
	if dist, err := Distributed(ctx, db); err != nil || dist {
		if err != nil {
			return Throttle{}, err
		}
		t, err := claimThrottleRouted(ctx, db, lane, caps)
		return t, wrap("read the throttle of lane "+lane, err)
	}
	var t Throttle
	var wait *float64
	if err := db.QueryRow(ctx, throttleSQL, lane, caps).Scan(&t.Held, &wait); err != nil {
		return t, wrap("read the throttle of lane "+lane, err)
	}
	if wait != nil && *wait > 0 {
		t.Retry = time.Duration(*wait * float64(time.Second))
	}
	return t, nil
}

// ensureKeysSQL makes the keys of new executions ($1 lanes, $2 keys, $3
// limits: 0 leaves a key's limit) known to the claim before the rows are
// written, in the creating transaction: each lane marked keyed (so the
// plain claim leaves it to the controlled one), with the empty key for its
// unkeyed executions; each key present, with its limit when one is given.
// A key row that exists is locked FOR KEY SHARE until the creating
// transaction ends, so the sweep cannot forget it under the new rows; the
// lock does not conflict with the claims' locks. Only rows that change
// are written: creating into known keys writes nothing here. It returns
// the keys of strict order among them, locked FOR NO KEY UPDATE: the
// creates of one strict key take their places one after the other
// (place).
const ensureKeysSQL = `
WITH want AS (
	SELECT DISTINCT ON (lane, key) lane, key, lim
	FROM unnest($1::text[], $2::text[], $3::int[]) AS w(lane, key, lim)
	ORDER BY lane, key, lim DESC
), held AS (
	SELECT f.lane, f.key, f.max_running FROM ff_key f JOIN want w ON f.lane = w.lane AND f.key = w.key
	FOR KEY SHARE OF f
), strict AS (
	SELECT f.lane, f.key FROM ff_key f JOIN want w ON f.lane = w.lane AND f.key = w.key
	WHERE f.strict ORDER BY f.lane, f.key
	FOR NO KEY UPDATE OF f
), lanes AS (
	INSERT INTO ff_lane AS l (lane, keyed)
	SELECT DISTINCT w.lane, true FROM want w
	WHERE NOT EXISTS (SELECT 1 FROM ff_lane x WHERE x.lane = w.lane AND x.keyed)
	ON CONFLICT (lane) DO UPDATE SET keyed = true
	RETURNING l.lane
), keys AS (
INSERT INTO ff_key AS f (lane, key, max_running)
SELECT w.lane, w.key, nullif(w.lim, 0) FROM want w
WHERE NOT EXISTS (SELECT 1 FROM held h WHERE h.lane = w.lane AND h.key = w.key
	AND (w.lim = 0 OR h.max_running IS NOT DISTINCT FROM w.lim))
UNION ALL
SELECT x.lane, '', NULL FROM (SELECT DISTINCT lane FROM want) x
WHERE NOT EXISTS (SELECT 1 FROM ff_key u WHERE u.lane = x.lane AND u.key = '')
ON CONFLICT (lane, key) DO UPDATE SET max_running = coalesce(excluded.max_running, f.max_running),
	updated_at = excluded.updated_at
)
SELECT lane, key FROM strict`

// EnsureKeys makes the concurrency keys of rs known to the claim (see
// ensureKeysSQL), and gives the rows of strict keys their places
// (KeySeq, in the order of rs); a no-op when none has a key. db must be
// the transaction that inserts rs (withKeys).
func EnsureKeys(ctx context.Context, db DB, rs []NewExecution) error {
	var lanes, keys []string
	var lims []int32
	for i := range rs {
		if rs[i].ConcurrencyKey == "" {
			continue
		}
		lanes = append(lanes, rs[i].Lane)
		keys = append(keys, rs[i].ConcurrencyKey)
		lims = append(lims, int32(rs[i].ConcurrencyLimit))
	}
	if len(keys) == 0 {
		return nil
	}
	strict, err := ensureKeys(ctx, db, lanes, keys, lims)
	if err != nil || len(strict) == 0 {
		return err
	}
	return place(ctx, db, rs, strict)
}

// place gives each row of a strict key its place in the key: the next
// values of ff_key_seq, in the order of rs. The caller holds the keys'
// rows (ensureKeysSQL, makeStrict), so a key's places follow the order
// its creates commit in.
func place(ctx context.Context, db DB, rs []NewExecution, strict map[[2]string]bool) error {
	n := 0
	for i := range rs {
		if strict[[2]string{rs[i].Lane, rs[i].ConcurrencyKey}] {
			n++
		}
	}
	rows, err := db.Query(ctx, `SELECT nextval('ff_key_seq') FROM generate_series(1, $1) ORDER BY 1`, n)
	if err != nil {
		return wrap("take places in strict keys", err)
	}
	seqs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil || len(seqs) != n {
		return fmt.Errorf("take %d places in strict keys: got %d: %w", n, len(seqs), err)
	}
	for i := range rs {
		if strict[[2]string{rs[i].Lane, rs[i].ConcurrencyKey}] {
			rs[i].KeySeq, seqs = &seqs[0], seqs[1:]
		}
	}
	return nil
}

// ensureKeys records keys of lanes with limits (0: unchanged), as
// ensureKeysSQL says, and returns the keys of strict order among them,
// locked.
func ensureKeys(ctx context.Context, db DB, lanes, keys []string, lims []int32) (map[[2]string]bool, error) {
	dist, err := Distributed(ctx, db)
	if err != nil {
		return nil, err
	}
	var strict map[[2]string]bool
	if dist {
		strict, err = ensureKeysRouted(ctx, db, lanes, keys, lims)
	} else {
		strict, err = keySet(db.Query(ctx, ensureKeysSQL, lanes, keys, lims))
	}
	if err != nil {
		return nil, wrap(fmt.Sprintf("record the concurrency keys of %d executions", len(keys)), mapStrictLimit(err))
	}
	return strict, nil
}

// keySet reads rows of (lane, key) into a set.
func keySet(rows pgx.Rows, err error) (map[[2]string]bool, error) {
	if err != nil {
		return nil, err
	}
	out := map[[2]string]bool{}
	var k [2]string
	_, err = pgx.ForEachRow(rows, []any{&k[0], &k[1]}, func() error {
		out[k] = true
		return nil
	})
	return out, err
}

// ErrStrictLimit: a key of strict order runs one execution at a time; a
// running limit above 1 was asked of one (ff_key_strict).
var ErrStrictLimit = errors.New("a key of strict order runs one execution at a time: its running limit is 1")

// mapStrictLimit is ErrStrictLimit for a refusal by ff_key_strict.
func mapStrictLimit(err error) error {
	if refusedBy(err, "23514", "ff_key_strict") {
		return ErrStrictLimit
	}
	return err
}

// hasKeys says whether any of rs has a concurrency key.
func hasKeys(rs []NewExecution) bool {
	for i := range rs {
		if rs[i].ConcurrencyKey != "" {
			return true
		}
	}
	return false
}

// withKeys runs insert, which writes rs, with their keys made known in
// the same transaction: db's when it is one, else one of its own. Rows
// without keys go straight to insert on db.
func withKeys(ctx context.Context, db DB, rs []NewExecution, insert func(db DB) error) error {
	if !hasKeys(rs) {
		return insert(db)
	}
	if inCallerTx(db) {
		if err := EnsureKeys(ctx, db, rs); err != nil {
			return err
		}
		return insert(db)
	}
	return InTx(ctx, db, func(tx pgx.Tx) error {
		if err := EnsureKeys(ctx, tx, rs); err != nil {
			return err
		}
		return insert(tx)
	})
}

// forgetKeysLockSQL locks, for ForgetIdleKeys, keys only their
// executions named that look idle on this statement's snapshot.
const forgetKeysLockSQL = `
SELECT k.lane, k.key FROM ff_key k
WHERE NOT k.configured AND k.key <> ''
	AND NOT EXISTS (SELECT 1 FROM ff_execution e WHERE e.state = 'pending' AND e.lane = k.lane AND e.concurrency_key = k.key)
	AND NOT EXISTS (SELECT 1 FROM ff_execution e WHERE e.state IN ('blocked', 'running') AND e.lane = k.lane AND e.concurrency_key = k.key)
ORDER BY k.lane, k.key
LIMIT $1
FOR UPDATE OF k SKIP LOCKED`

// forgetKeysSQL deletes the locked keys that are idle on a snapshot taken
// after the locks (two tests, one per index: the keyed claim index holds
// a key's pending rows, ff_execution_live_keyed its blocked and running
// ones; one test of the three states would read neither): a creator holds its key FOR KEY SHARE until its rows
// commit, so no key is deleted under rows being created into it.
const forgetKeysSQL = `
DELETE FROM ff_key k
USING unnest($1::text[], $2::text[]) AS d(lane, key)
WHERE k.lane = d.lane AND k.key = d.key
	AND NOT EXISTS (SELECT 1 FROM ff_execution e WHERE e.state = 'pending' AND e.lane = k.lane AND e.concurrency_key = k.key)
	AND NOT EXISTS (SELECT 1 FROM ff_execution e WHERE e.state IN ('blocked', 'running') AND e.lane = k.lane AND e.concurrency_key = k.key)`

// ForgetIdleKeys deletes up to limit keys that only their executions
// named (not configured by SetKey) and that have no live execution left,
// so that the claims' turn order walks keys with work; it returns how
// many it deleted. A key named again is recorded again, with the limit
// its new executions give.
func ForgetIdleKeys(ctx context.Context, db DB, limit int) (int, error) {
	dist, err := Distributed(ctx, db)
	if err != nil {
		return 0, wrap("forget idle concurrency keys", err)
	}
	var n int
	err = InTx(ctx, db, func(tx pgx.Tx) error {
		if dist {
			var err error
			n, err = forgetIdleKeysRouted(ctx, tx, limit)
			return err
		}
		rows, err := tx.Query(ctx, forgetKeysLockSQL, limit)
		if err != nil {
			return err
		}
		var lanes, keys []string
		for rows.Next() {
			var l, k string
			if err := rows.Scan(&l, &k); err != nil {
				rows.Close()
				return err
			}
			lanes, keys = append(lanes, l), append(keys, k)
		}
		if err := rows.Err(); err != nil || len(keys) == 0 {
			return err
		}
		tag, err := tx.Exec(ctx, forgetKeysSQL, lanes, keys)
		n = int(tag.RowsAffected())
		return err
	})
	return n, wrap("forget idle concurrency keys", err)
}

// KeyChange is a change to a key's control; nil fields stay as they are.
type KeyChange struct {
	MaxRunning *int          // 0: none
	Rate       *ffdtype.Rate // Count 0: none
	Weight     *int
	// Strict: strict order (its running limit 1 when it has none), or
	// fair turns again.
	Strict *bool
}

// rateArgs are a rate's columns: count, interval (microseconds) and
// burst, all nil for no rate. set says whether r changes the rate.
func rateArgs(r *ffdtype.Rate) (set bool, count, per, burst any) {
	if r == nil {
		return false, nil, nil, nil
	}
	if r.Count == 0 {
		return true, nil, nil, nil
	}
	return true, r.Count, r.Per.Microseconds(), r.Burst
}

// SetKey configures key of lane (creating it, and marking the lane keyed)
// and returns it. A configured key is kept while idle.
func SetKey(ctx context.Context, db DB, lane, key string, ch KeyChange) (*ffdtype.Key, error) {
	rateSet, count, per, burst := rateArgs(ch.Rate)
	var k *ffdtype.Key
	err := InTx(ctx, db, func(tx pgx.Tx) error {
		// The key "" (the lane's unkeyed executions) exists from the
		// lane's first keyed execution on; it is not created here.
		if key != "" {
			if _, err := ensureKeys(ctx, tx, []string{lane}, []string{key}, []int32{0}); err != nil {
				return err
			}
		}
		if ch.Strict != nil && *ch.Strict {
			if err := makeStrict(ctx, tx, lane, key); err != nil {
				return err
			}
		}
		// The time goes in through VALUES: a distributed Postgres allows
		// only immutable functions in DO UPDATE SET. A key made strict
		// without a limit gets 1; a limit above 1 on a strict key, or
		// none, ff_key_strict refuses.
		tag, err := tx.Exec(ctx, `UPDATE ff_key k SET configured = true,
				strict = coalesce($10::boolean, k.strict),
				max_running = CASE
					WHEN $3::int IS NULL THEN CASE WHEN coalesce($10::boolean, k.strict) THEN coalesce(k.max_running, 1) ELSE k.max_running END
					WHEN $3::int > 0 THEN $3::int END,
				rate_count = CASE WHEN $4::boolean THEN $5::int ELSE k.rate_count END,
				rate_interval = CASE WHEN $4::boolean THEN $6::bigint * interval '1 microsecond' ELSE k.rate_interval END,
				rate_burst = CASE WHEN $4::boolean THEN $7::int ELSE k.rate_burst END,
				tokens = CASE WHEN $4::boolean THEN NULL ELSE k.tokens END,
				tokens_at = CASE WHEN $4::boolean THEN NULL ELSE k.tokens_at END,
				weight = coalesce($8::int, k.weight),
				updated_at = $9
			WHERE k.lane = $1 AND k.key = $2`, lane, key, ch.MaxRunning, rateSet, count, per, burst, ch.Weight, time.Now(), ch.Strict)
		if err != nil {
			return mapStrictLimit(err)
		}
		if tag.RowsAffected() == 0 {
			return ErrKeyNotFound
		}
		if _, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, ChannelReady, lane); err != nil {
			return err
		}
		ks, err := listKeysRouted(ctx, tx, lane, nil, &key, 1)
		if err != nil {
			return err
		}
		if len(ks) != 1 {
			return fmt.Errorf("key %q of lane %s not found after setting it", key, lane)
		}
		k = ks[0]
		return nil
	})
	if errors.Is(err, ErrKeyNotFound) || errors.Is(err, ErrStrictLimit) {
		return nil, err
	}
	if err != nil {
		return nil, wrap(fmt.Sprintf("set key %q of lane %s", key, lane), err)
	}
	return k, nil
}

// makeStrict gives the live executions of a key about to be made strict
// their places, in the order the key's claims took them (priority, then
// run_at, then id). It first locks the key's row FOR UPDATE, which waits
// for the creates under way (they hold it FOR KEY SHARE) and holds off
// new ones until the key is strict: each execution of the key then has a
// place, from here or from its create.
func makeStrict(ctx context.Context, tx pgx.Tx, lane, key string) error {
	if _, err := tx.Exec(ctx, `SELECT 1 FROM ff_key WHERE lane = $1 AND key = $2 FOR UPDATE`, lane, key); err != nil {
		return err
	}
	rows, err := tx.Query(ctx, `SELECT partition_key, execution_id FROM ff_execution
		WHERE state IN ('blocked', 'pending') AND lane = $1 AND concurrency_key = $2 AND key_seq IS NULL
		ORDER BY priority DESC, run_at, execution_id`, lane, key)
	if err != nil {
		return err
	}
	var rs []NewExecution
	var p int16
	var id uuid.UUID
	if _, err := pgx.ForEachRow(rows, []any{&p, &id}, func() error {
		rs = append(rs, NewExecution{ID: ffdtype.ExecutionID{Partition: p, UUID: id}, Lane: lane, ConcurrencyKey: key})
		return nil
	}); err != nil || len(rs) == 0 {
		return err
	}
	if err := place(ctx, tx, rs, map[[2]string]bool{{lane, key}: true}); err != nil {
		return err
	}
	parts, ids, seqs := make([]int16, len(rs)), make([]pgtype.UUID, len(rs)), make([]int64, len(rs))
	for i, r := range rs {
		parts[i], ids[i], seqs[i] = r.ID.Partition, pgUUID(r.ID.UUID), *r.KeySeq
	}
	_, err = tx.Exec(ctx, `UPDATE ff_execution e SET key_seq = i.seq
		FROM unnest($1::smallint[], $2::uuid[], $3::bigint[]) AS i(p, id, seq)
		WHERE e.partition_key = i.p AND e.execution_id = i.id`, parts, ids, seqs)
	return err
}

// ForgetKey returns a configured key to one its executions name: its
// limits and weight cleared, forgotten by the sweep once idle.
func ForgetKey(ctx context.Context, db DB, lane, key string) error {
	tag, err := db.Exec(ctx, `UPDATE ff_key SET configured = false, strict = false, max_running = NULL, rate_count = NULL,
		rate_interval = NULL, rate_burst = NULL, tokens = NULL, tokens_at = NULL, weight = 1
		WHERE lane = $1 AND key = $2`, lane, key)
	if err != nil {
		return wrap(fmt.Sprintf("forget key %q of lane %s", key, lane), err)
	}
	if tag.RowsAffected() == 0 {
		return ErrKeyNotFound
	}
	return nil
}

// ErrKeyNotFound: no such key in the lane.
var ErrKeyNotFound = errors.New("no such key")

// ListKeys lists lane's keys in key order from after (exclusive; "" from
// the first), at most limit, with what runs and is due of each.
func ListKeys(ctx context.Context, db DB, lane, after string, limit int) ([]*ffdtype.Key, error) {
	var from *string
	if after != "" {
		from = &after
	}
	ks, err := listKeysRouted(ctx, db, lane, from, nil, limit)
	return ks, wrap("list keys of lane "+lane, err)
}

// The lanes found under control lately, by pool, so that their claims go
// straight to the controlled claim (one round trip) rather than through
// the plain claim and the probe first (three). An entry lasts
// controlTTL from its last confirmation: a lane taken out of control
// (resumed, uncapped, its rate removed; a keyed lane stays keyed) is
// claimed by the plain claim again at most that long after.
var (
	controlled   sync.Map // controlKeyOf -> time.Time (until)
	controlCount atomic.Int64
)

const (
	controlTTL      = time.Second
	maxControlCache = 10000
)

// controlKeyOf is a lane of one pool's database.
type controlKeyOf struct {
	db   any
	lane string
}

// controlKey is lane's key in the cache; none in a caller's transaction
// (whose claims take the whole path) or for a db of no pool.
func controlKey(db DB, lane string) (controlKeyOf, bool) {
	p, ok := db.(*pgxpool.Pool)
	if !ok {
		return controlKeyOf{}, false
	}
	return controlKeyOf{p, lane}, true
}

func controlledRecently(k controlKeyOf) bool {
	v, ok := controlled.Load(k)
	return ok && time.Now().Before(v.(time.Time))
}

func markControlled(k controlKeyOf) {
	if _, loaded := controlled.Swap(k, time.Now().Add(controlTTL)); !loaded && controlCount.Add(1) > maxControlCache {
		controlled.Clear()
		controlCount.Store(0)
	}
}

// claimStillControlled claims from a lane the cache says is under
// control. When the claim takes something the lane is still controlled.
// When it takes nothing, the probe says why: still under control
// (throttled, or nothing due: the throttle is read), or no longer (again:
// the caller takes the whole path). On a distributed Postgres, whose
// routed claim needs the probe's answer first, the probe comes first
// (claimUnderControl): what the cache spares there is the plain claim's
// read of every shard for due work the controlled claim does not take.
func claimStillControlled(ctx context.Context, db DB, k controlKeyOf, lane string, caps []string, max int, worker string) (out []*ffdtype.Execution, th Throttle, again bool, err error) {
	dist, err := Distributed(ctx, db)
	if err != nil {
		return nil, th, false, err
	}
	if dist {
		var under bool
		out, th, under, err = claimUnderControl(ctx, db, lane, caps, max, worker)
		if err == nil && !under {
			controlled.Delete(k)
			again = true
		}
		return out, th, again, err
	}
	err = WithRetry(ctx, db, func() error {
		var err error
		out, err = claimControlled(ctx, db, lane, caps, max, worker)
		return err
	})
	if err != nil {
		return nil, th, false, err
	}
	if len(out) == 0 {
		c, ok, err := readLaneControl(ctx, db, lane)
		if err != nil {
			return nil, th, false, err
		}
		if !ok || !(c.capped || c.rated || c.keyed) {
			controlled.Delete(k)
			return nil, th, true, nil
		}
		if c.paused {
			markControlled(k)
			return nil, th, false, nil
		}
	}
	markControlled(k)
	if len(out) < max {
		th, err = ClaimThrottle(ctx, db, lane, caps)
	}
	return out, th, false, err
}

// RunningByKey counts the running executions of lane by concurrency key
// (keyed ones only): what the fault suite samples.
func RunningByKey(ctx context.Context, db DB, lane string) (map[string]int, error) {
	rows, err := db.Query(ctx, `SELECT concurrency_key, count(*) FROM ff_execution
		WHERE lane = $1 AND state = 'running' AND concurrency_key IS NOT NULL GROUP BY 1`, lane)
	if err != nil {
		return nil, wrap("count running executions by key in lane "+lane, err)
	}
	out, err := keyCounts(rows)
	return out, wrap("count running executions by key in lane "+lane, err)
}

// keyCounts collects rows of (key, count).
func keyCounts(rows pgx.Rows) (map[string]int, error) {
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			return nil, err
		}
		out[k] = n
	}
	return out, rows.Err()
}

// FirstStarts lists when each execution of lane (of key, when set) first
// started, in order: what the fault suite checks rates against.
func FirstStarts(ctx context.Context, db DB, lane, key string) ([]time.Time, error) {
	rows, err := db.Query(ctx, `SELECT started_at FROM ff_execution WHERE lane = $1 AND started_at IS NOT NULL
		AND ($2 = '' OR concurrency_key = $2) ORDER BY started_at`, lane, key)
	if err != nil {
		return nil, wrap("read the starts of lane "+lane, err)
	}
	ts, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
	return ts, wrap("read the starts of lane "+lane, err)
}
