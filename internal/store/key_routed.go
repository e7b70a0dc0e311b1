package store

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/flowfabric/ffd/ffdtype"
)

// The controlled claim on a distributed Postgres. There ff_key and
// ff_lane_room are distributed by lane (one shard, apart from
// ff_execution's), ff_lane is a reference table, and a locking read must
// name one shard; so the claim is the single-node claim's steps as
// separate statements of one transaction, the arithmetic in Go:
//
//  1. the lane's row, and its room, locked when capped or rate-limited:
//     its cap less what runs in it (counted after the lock), its tokens;
//  2. for a keyed lane, the keys whose turn it is, read without a lock
//     (their rows, which have due work, which are below their limits),
//     then locked SKIP LOCKED in key order; their running executions
//     are the count read before the locks plus what their claimed
//     counts grew by meanwhile (routedTurn);
//  3. each key's best due executions (per key or per shard, pipelined),
//     and the rounds by weight, as claimControlledSQL takes them;
//  4. the claim, one statement per shard naming the shard's partitions
//     (a row another claimer took meanwhile is no longer pending and is
//     left), and the keys' new turns and claimed counts in one;
//  5. the tokens spent.
//
// A lane without keys skips steps 2 to 4: it takes its room shard by
// shard from the lane's hint (claimShards), as a lane without control
// does, without a read of every shard for its best due executions at
// each claim.
//
// No statement of it writes a reference table, so the lane's and its
// keys' rows are written on the node of their shard alone. The
// transaction runs Citus's multi-shard statements sequentially all the
// same: a caller's transaction (ClaimTx) may go on to write a reference
// table, which Citus refuses after a parallel read of distributed tables
// in the same transaction.

// routedLane is a lane's control row as the routed claim reads it.
type routedLane struct {
	paused, keyed bool
	maxRunning    *int
	rate          rateState
}

// rateState is a row's rate limit and bucket; count nil: no rate.
type rateState struct {
	count, burst *int
	perUS        *int64
	tokens       *float64
	at           *time.Time
}

// tokensAt is the bucket's tokens at now (as tokensAt in SQL), and
// whether there is a rate at all.
func (r rateState) tokensAt(now time.Time) (float64, bool) {
	if r.count == nil {
		return 0, false
	}
	burst := float64(*r.burst)
	if r.tokens == nil || r.at == nil {
		return burst, true
	}
	elapsed := max(0, now.Sub(*r.at).Seconds())
	per := float64(*r.perUS) / 1e6
	return math.Min(burst, *r.tokens+elapsed*float64(*r.count)/per), true
}

// wait is how long until the bucket holds a whole token; 0 when it does,
// or when there is no rate.
func (r rateState) wait(now time.Time) time.Duration {
	t, ok := r.tokensAt(now)
	if !ok || t >= 1 {
		return 0
	}
	per := float64(*r.perUS) / 1e6
	return time.Duration((1 - t) * per / float64(*r.count) * float64(time.Second))
}

// routedKey is a key's row as the routed claim reads it.
type routedKey struct {
	key        string
	maxRunning *int
	rate       rateState
	weight     int
	turnUsed   int // starts in its current turn (keyTurnSQL)
	strict     bool
	claimed    int64 // what claims took of it so far (migration 00042)
}

// turnLeft is what is left of k's turn: its weight less what it took in
// the turn so far (a weight lowered meanwhile leaves it at least 1).
func (k routedKey) turnLeft() int { return k.weight - min(k.turnUsed, k.weight-1) }

const routedLaneSQL = `SELECT paused, keyed, max_running, rate_count,
	(extract(epoch FROM rate_interval) * 1e6)::bigint, rate_burst
FROM ff_lane WHERE lane = $1`

// routedRoomSQL reads a lane's rate bucket (ff_lane_room).
const routedRoomSQL = `SELECT tokens, tokens_at FROM ff_lane_room WHERE lane = $1`

const routedKeyColumns = `key, max_running, rate_count, (extract(epoch FROM rate_interval) * 1e6)::bigint,
	rate_burst, tokens, tokens_at, weight, turn_used, strict, claimed`

func scanRoutedKey(row pgx.Row) (routedKey, error) {
	var k routedKey
	err := row.Scan(&k.key, &k.maxRunning, &k.rate.count, &k.rate.perUS, &k.rate.burst, &k.rate.tokens, &k.rate.at, &k.weight, &k.turnUsed, &k.strict, &k.claimed)
	return k, err
}

// routedDueKeysSQL names the keys of lane $1 with a due execution the
// claimer can run (the empty key for unkeyed ones), and the partitions
// those executions lie on.
const routedDueKeysSQL = `SELECT DISTINCT coalesce(e.concurrency_key, ''), e.partition_key FROM ff_execution e WHERE ` + dueFilter

// routedKeyStateSQL is routedDueKeysSQL and the count of every key's
// running executions in one read across the shards: rows of the due
// keys and their partitions (running false), and of each key's running
// executions on a partition (running true). A union in a subquery, each
// part naming the partition in one place, is one task a shard on Citus;
// as two statements each was a step through every shard in turn on the
// node's one connection (about 20 ms of the coordinator's time a claim,
// with 32 shards on one worker node).
const routedKeyStateSQL = `SELECT * FROM (
	SELECT false AS running, coalesce(e.concurrency_key, '') AS key, e.partition_key, max(e.priority)::bigint AS n
	FROM ff_execution e WHERE ` + dueFilter + ` GROUP BY 2, 3
	UNION ALL
	SELECT true, concurrency_key, partition_key, count(*) FROM ff_execution
	WHERE state = 'running' AND lane = $1 AND concurrency_key IS NOT NULL GROUP BY 2, 3
) s`

// routedCandidatesSQL are the reads of a group's best due executions,
// at most $4: a key's ($3) with routedKeyed, the lane's unkeyed ones ($3
// NULL) without; with routedNarrowed, on the partitions $5 only.
var routedCandidatesSQL = func() (out [4]string) {
	for i := range out {
		test := `e.concurrency_key IS NULL AND $3::text IS NULL`
		if i&routedKeyed != 0 {
			test = `e.concurrency_key = $3`
		}
		if i&routedNarrowed != 0 {
			test += ` AND e.partition_key = ANY($5::smallint[])`
		}
		out[i] = `SELECT 0, e.partition_key, e.execution_id, e.priority, e.run_at FROM ff_execution e
WHERE ` + dueFilter + ` AND ` + test + `
ORDER BY e.priority DESC, e.run_at, e.execution_id LIMIT $4`
	}
	return out
}()

// The forms of routedCandidatesSQL.
const (
	routedKeyed    = 1
	routedNarrowed = 2
)

const (
	// routedStrictSQL reads the head of a key ($3) of strict order
	// (strictHeadSQL), when due ($4: at most, as routedCandidatesSQL's).
	routedStrictSQL = `SELECT 0, e.partition_key, e.execution_id, e.priority, e.run_at FROM ff_execution e
WHERE ` + dueFilter + ` AND e.concurrency_key = $3 AND e.execution_id = (SELECT h.execution_id FROM ff_execution h
	WHERE h.state = 'pending' AND h.key_seq IS NOT NULL AND h.lane = $1 AND h.concurrency_key = $3
	ORDER BY h.key_seq LIMIT 1)
LIMIT $4`
	// routedShardCandidatesSQL reads the best due executions of keys $3
	// on the partitions $6 of one shard, at most $4 of each, each row
	// tagged with its key's $5.
	routedShardCandidatesSQL = `SELECT g.which, c.partition_key, c.execution_id, c.priority, c.run_at
FROM unnest($3::text[], $4::int[], $5::int[]) AS g(key, room, which)
CROSS JOIN LATERAL (
	SELECT e.partition_key, e.execution_id, e.priority, e.run_at FROM ff_execution e
	WHERE e.partition_key = ANY($6::smallint[]) AND ` + dueFilter + ` AND e.concurrency_key = g.key
	ORDER BY e.priority DESC, e.run_at, e.execution_id LIMIT g.room) c`
)

// routedClaimSQL claims the picked executions of one shard's partitions
// ($5) that are still pending, at the time $6.
var routedClaimSQL = `
UPDATE ff_execution e SET ` + leaseStart("$1", "$2::timestamptz", func(d string) string {
	return timePlus("$2::timestamptz", intervalSeconds(d))
}) + `
WHERE e.partition_key = ANY($3::smallint[]) AND e.execution_id = ANY($4::uuid[]) AND e.state = 'pending'
RETURNING ` + execColumns

// routedGroup is one key's share of a routed claim.
type routedGroup struct {
	key    string // "": the unkeyed executions
	room   int
	weight int
	rate   rateState
	rated  bool
	tokens float64
	strict bool
	// parts are the partitions holding its due executions (a keyed
	// lane's turn reads them); nil when unknown (a lane without keys).
	parts []int16
}

// routedCandidate is a due execution a group offers.
type routedCandidate struct {
	id        ffdtype.ExecutionID
	priority  int
	runAt     time.Time
	group, rn int
	round     int
	key       string
}

func claimControlledRouted(ctx context.Context, db DB, lane string, c laneControl, caps []string, max int, worker string) ([]*ffdtype.Execution, error) {
	var out []*ffdtype.Execution
	err := InTx(ctx, db, func(tx pgx.Tx) error {
		out = nil
		st, err := routedRead(ctx, tx, lane, c, caps)
		if err != nil || !st.found || st.lane.paused {
			return err
		}
		room := max
		if st.lane.maxRunning != nil {
			room = min(room, *st.lane.maxRunning-st.running)
		}
		laneTokens, laneRated := st.lane.rate.tokensAt(st.now)
		if laneRated {
			room = min(room, int(math.Floor(laneTokens)))
		}
		if room <= 0 {
			return nil
		}
		if !st.lane.keyed {
			// One group, the lane's: shard by shard from the lane's hint,
			// as a claim of a lane without control takes it.
			if out, err = claimShards(ctx, tx, lane, caps, room, worker, true); err != nil {
				return err
			}
			return routedSpend(ctx, tx, lane, st.lane, laneRated, laneTokens, nil, out, st.now)
		}
		groups, turns, err := routedTurn(ctx, tx, lane, st, room)
		if err != nil {
			return err
		}
		picked, err := routedPick(ctx, tx, lane, caps, groups, room)
		if err != nil {
			return err
		}
		if len(picked) == 0 {
			// Nothing left to take: the turns are recorded all the same.
			return turns.record(ctx, tx, lane)
		}
		if out, err = routedClaim(ctx, tx, lane, picked, turns, worker, st.now); err != nil {
			return err
		}
		return routedSpend(ctx, tx, lane, st.lane, laneRated, laneTokens, groups, out, st.now)
	})
	sortClaimed(out)
	return out, err
}

// routedState is what a routed controlled claim reads before it takes
// anything: the time, the lane's row (locked when capped or
// rate-limited) and what runs in it when capped (counted after the
// lock), and for a keyed lane its keys in turn order, those with due work
// (and where it lies) and what each runs.
type routedState struct {
	now        time.Time
	lane       routedLane
	found      bool
	running    int
	keys       []routedKey
	due        map[string][]int16 // each key's partitions with due work
	dueBest    map[string][]int   // the highest priority due on each, as due
	keyRunning map[string]int
}

// routedRead reads the claim's routedState in one round trip, with the
// transaction's setting; the lane's controls c (read before the
// transaction) say which reads it needs, and a second round trip reads
// what they did not foresee.
func routedRead(ctx context.Context, tx pgx.Tx, lane string, c laneControl, caps []string) (*routedState, error) {
	st := &routedState{}
	b := &pgx.Batch{}
	b.Queue(`SET LOCAL citus.multi_shard_modify_mode TO 'sequential'`)
	b.Queue(`SELECT now()`).QueryRow(func(row pgx.Row) error { return row.Scan(&st.now) })
	if c.capped || c.rated {
		queueLaneRoom(b, lane, st)
	}
	b.Queue(routedLaneSQL, lane).QueryRow(func(row pgx.Row) error {
		l := &st.lane
		err := row.Scan(&l.paused, &l.keyed, &l.maxRunning, &l.rate.count, &l.rate.perUS, &l.rate.burst)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		st.found = err == nil
		return err
	})
	if c.capped {
		queueLaneRunning(b, lane, st)
	}
	if c.keyed {
		queueKeyReads(b, lane, caps, st)
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, err
	}
	if !st.found || st.lane.paused {
		return st, nil
	}
	// The controls changed since they were read: read what they now need.
	b = &pgx.Batch{}
	if (st.lane.maxRunning != nil || st.lane.rate.count != nil) && !(c.capped || c.rated) {
		queueLaneRoom(b, lane, st)
	}
	if st.lane.maxRunning != nil && !c.capped {
		queueLaneRunning(b, lane, st)
	}
	if st.lane.keyed && !c.keyed {
		queueKeyReads(b, lane, caps, st)
	}
	if b.Len() > 0 {
		return st, tx.SendBatch(ctx, b).Close()
	}
	return st, nil
}

// queueLaneRoom queues the lock of lane's room (ff_lane_room) and the read
// of its rate bucket into st: claims of a capped or rate-limited lane
// count its room one after the other.
func queueLaneRoom(b *pgx.Batch, lane string, st *routedState) {
	b.Queue(routedRoomSQL+` FOR UPDATE`, lane).Query(scanRoom(&st.lane.rate))
}

// scanRoom scans the row of routedRoomSQL, if any, into r's bucket (none:
// a full one).
func scanRoom(r *rateState) func(pgx.Rows) error {
	return func(rows pgx.Rows) error {
		_, err := pgx.ForEachRow(rows, []any{&r.tokens, &r.at}, func() error { return nil })
		return err
	}
}

// queueLaneRunning queues the count of lane's running executions into st.
func queueLaneRunning(b *pgx.Batch, lane string, st *routedState) {
	b.Queue(`SELECT count(*) FROM ff_execution WHERE state = 'running' AND lane = $1`, lane).QueryRow(func(row pgx.Row) error {
		return row.Scan(&st.running)
	})
}

// queueKeyReads queues the reads of a keyed lane's turn into st: its keys
// in turn order, the keys with due work the claimer can run and the
// partitions that hold it, and every key's running executions.
func queueKeyReads(b *pgx.Batch, lane string, caps []string, st *routedState) {
	b.Queue(`SELECT `+routedKeyColumns+` FROM ff_key WHERE lane = $1 ORDER BY served_at, key`, lane).Query(func(rows pgx.Rows) error {
		var err error
		st.keys, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (routedKey, error) { return scanRoutedKey(row) })
		return err
	})
	b.Queue(routedKeyStateSQL, lane, caps).Query(func(rows pgx.Rows) error {
		st.due, st.dueBest, st.keyRunning = map[string][]int16{}, map[string][]int{}, map[string]int{}
		var running bool
		var key string
		var part int16
		var n int
		_, err := pgx.ForEachRow(rows, []any{&running, &key, &part, &n}, func() error {
			if running {
				st.keyRunning[key] += n
			} else {
				st.due[key], st.dueBest[key] = append(st.due[key], part), append(st.dueBest[key], n)
			}
			return nil
		})
		return err
	})
}

// routedClaim claims the picked executions, one statement per shard, in
// one round trip; with them go the keys' turns, and each key's claimed
// count grows by what it picked (keyTurns.queue).
func routedClaim(ctx context.Context, tx pgx.Tx, lane string, picked []routedCandidate, turns keyTurns, worker string, now time.Time) ([]*ffdtype.Execution, error) {
	shards, err := byShard(ctx, tx, picked, func(c routedCandidate) int16 { return c.id.Partition })
	if err != nil {
		return nil, err
	}
	var out []*ffdtype.Execution
	b := &pgx.Batch{}
	for _, g := range shards {
		ids := make([]pgtype.UUID, len(g.items))
		for i, c := range g.items {
			ids[i] = pgUUID(c.id.UUID)
		}
		b.Queue(routedClaimSQL, worker, now, g.parts, ids).Query(func(rows pgx.Rows) error {
			xs, err := collectExecutions(rows)
			out = append(out, xs...)
			return err
		})
	}
	turns.queue(b, lane, picked)
	return out, tx.SendBatch(ctx, b).Close()
}

// keyTurns are the turns a keyed claim on a distributed Postgres takes
// (routedTakeTurns): each key served at served (its turn used up; nil:
// not) with used of its next turn used. The claim writes them with the
// keys' claimed counts in one statement (keyTurnsSQL), each statement
// through ff_key being a step through the node that holds its shard.
type keyTurns struct {
	keys   []string
	served []*time.Time
	used   []int
}

// keyTurnsSQL records the turns of keys ($2) of lane $1: each key served
// at $3 (NULL: not), with $4 of its next turn used, and $5 more claimed.
// The claim holds the rows locked (routedTurn). A row picked but taken
// by another claimer first is counted too: a count that errs high only
// leaves later claims less room.
const keyTurnsSQL = `UPDATE ff_key k SET served_at = coalesce(t.served_at, k.served_at), turn_used = t.used,
	claimed = k.claimed + t.n
	FROM unnest($2::text[], $3::timestamptz[], $4::int[], $5::int[]) AS t(key, served_at, used, n)
	WHERE k.lane = $1 AND k.key = ANY($2::text[]) AND k.key = t.key`

// queue queues into b the statement that records the turns and what the
// claim picked of each key; nothing when no key's turn came.
func (t keyTurns) queue(b *pgx.Batch, lane string, picked []routedCandidate) {
	if len(t.keys) == 0 {
		return
	}
	took := map[string]int{}
	for _, c := range picked {
		took[c.key]++
	}
	n := make([]int, len(t.keys))
	for i, k := range t.keys {
		if k != "" { // the lane's unkeyed executions have no limit to count against
			n[i] = took[k]
		}
	}
	b.Queue(keyTurnsSQL, lane, t.keys, t.served, t.used, n)
}

// record writes the turns, with nothing picked, in a round trip of their
// own.
func (t keyTurns) record(ctx context.Context, tx pgx.Tx, lane string) error {
	b := &pgx.Batch{}
	if t.queue(b, lane, nil); b.Len() == 0 {
		return nil
	}
	return tx.SendBatch(ctx, b).Close()
}

// routedTurn locks the keys whose turn it is and returns them, in turn
// order, with their room, and the counts of their shares into their
// turns, as keyTurnSQL makes them.
//
// Their running executions are st's counts (read across the shards
// before the locks, after the keys' rows) and what claims took of each
// since its row was read: its claimed count as the lock reads it, less
// the one st read. A claim that committed between the two reads is
// counted twice, which only makes the room smaller; none is missed, as
// every claim of a key holds its lock while it takes and counts.
func routedTurn(ctx context.Context, tx pgx.Tx, lane string, st *routedState, room int) ([]routedGroup, keyTurns, error) {
	shardOf, err := shardMap(ctx, tx)
	if err != nil {
		return nil, keyTurns{}, err
	}
	turn, parts := routedTurnOrder(st, room, shardOf)
	if len(turn) == 0 {
		return nil, keyTurns{}, nil
	}
	sorted := make([]string, 0, len(turn))
	for _, k := range turn {
		sorted = append(sorted, k.key)
	}
	slices.Sort(sorted)
	read := make(map[string]int64, len(turn)) // each key's claimed count as st read it
	for _, k := range turn {
		read[k.key] = k.claimed
	}
	byKey := map[string]routedKey{}
	running := map[string]int{}
	rows, err := tx.Query(ctx, `SELECT `+routedKeyColumns+` FROM ff_key WHERE lane = $1 AND key = ANY($2::text[])
		ORDER BY key FOR NO KEY UPDATE SKIP LOCKED`, lane, sorted)
	if err != nil {
		return nil, keyTurns{}, err
	}
	_, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (routedKey, error) {
		k, err := scanRoutedKey(row)
		byKey[k.key] = k
		running[k.key] = st.keyRunning[k.key] + int(k.claimed-read[k.key])
		return k, err
	})
	if err != nil {
		return nil, keyTurns{}, err
	}
	groups, turns := routedTakeTurns(st.now, turn, parts, byKey, running, room)
	return groups, turns, nil
}

// focusShards is how many shards a keyed claim on a distributed
// Postgres takes its work from, beyond those of its first key
// (routedTurnOrder).
const focusShards = 1

// routedTurnOrder walks the turn order as keyTurnSQL does, on the reads
// of st (without locks): due keys below their limits with a token, each
// offering what is left of its turn, until the slots are spoken for.
// It returns the keys and the partitions each offers (turnFocus): a
// claim, and the worker's completions of what it took, write few shards,
// one transaction each, where a turn over 1,000 keys spread over every
// shard took a little from each.
func routedTurnOrder(st *routedState, room int, shardOf func(int16) int64) ([]routedKey, map[string][]int16) {
	var turn []routedKey
	parts := map[string][]int16{}
	f := turnFocus{shardOf: shardOf}
	before := 0
	for _, k := range st.keys {
		if before >= room {
			break
		}
		if st.due[k.key] == nil || (k.maxRunning != nil && st.keyRunning[k.key] >= *k.maxRunning) {
			continue
		}
		if t, rated := k.rate.tokensAt(st.now); rated && t < 1 {
			continue
		}
		on := f.offer(st.due[k.key], st.dueBest[k.key])
		if len(on) == 0 {
			continue
		}
		turn, parts[k.key] = append(turn, k), on
		before += min(k.turnLeft(), room)
	}
	return turn, parts
}

// turnFocus is the shards a keyed claim takes its work from: those of
// the first key in the turn order that can run, which offers all its due
// work; then, while fewer than focusShards more are chosen, the shard of
// the best due execution of each next key whose best lies on none chosen
// yet. A key offers its due work on the chosen shards, and only when its
// best lies there (the highest priority due; on one of them, for a tie),
// so each key's best comes first as on one Postgres; a key whose best
// lies elsewhere keeps its place in the order for a later claim.
//
// Fairness holds: the first key that can run always offers its work, so
// each claim serves the key that waited longest, and a key served goes to
// the back of the order. What it gives up: a key further back may wait
// behind keys after it in the order that lie on the chosen shards, for as
// many claims as keys ahead of it choose other shards. A key's
// executions share a partition when they are created alone
// (ident.ConcurrencyKeyPartition), so its work lies on one shard.
type turnFocus struct {
	shardOf func(int16) int64
	shards  []int64
	first   int // how many shards the first key chose
}

// offer is those of a key's due partitions (due, with the highest
// priority due on each, best) the claim takes from; none when its best
// lies on no shard chosen and no more may be.
func (f *turnFocus) offer(due []int16, best []int) []int16 {
	if len(f.shards) == 0 {
		for _, p := range due {
			if s := f.shardOf(p); !slices.Contains(f.shards, s) {
				f.shards = append(f.shards, s)
			}
		}
		f.first = len(f.shards)
		return due
	}
	top := slices.Max(best)
	at := -1
	for i, p := range due {
		if best[i] == top && (at < 0 || slices.Contains(f.shards, f.shardOf(p))) {
			at = i
		}
	}
	if s := f.shardOf(due[at]); !slices.Contains(f.shards, s) {
		if len(f.shards)-f.first >= focusShards {
			return nil
		}
		f.shards = append(f.shards, s)
	}
	var on []int16
	for _, p := range due {
		if slices.Contains(f.shards, f.shardOf(p)) {
			on = append(on, p)
		}
	}
	return on
}

// scanDueKeys reads routedDueKeysSQL's rows: each key's partitions.
func scanDueKeys(rows pgx.Rows) (map[string][]int16, error) {
	due := map[string][]int16{}
	var key string
	var part int16
	_, err := pgx.ForEachRow(rows, []any{&key, &part}, func() error {
		due[key] = append(due[key], part)
		return nil
	})
	return due, err
}

// routedTakeTurns makes a group of each key of turn that this claim
// locked, with its room and its partitions of due work on the shards
// routedTurnOrder chose (parts), and counts its share into its turn (a
// turn used up moves the key to the back of the turn order).
func routedTakeTurns(now time.Time, turn []routedKey, parts map[string][]int16,
	byKey map[string]routedKey, running map[string]int, room int) ([]routedGroup, keyTurns) {
	var groups []routedGroup
	var t keyTurns
	before := 0
	for i, planned := range turn {
		k, ok := byKey[planned.key]
		if !ok {
			continue // another claim holds it
		}
		g := routedGroup{key: k.key, room: room, weight: k.weight, rate: k.rate, strict: k.strict, parts: parts[k.key]}
		if k.maxRunning != nil {
			g.room = min(g.room, *k.maxRunning-running[k.key])
		}
		if g.tokens, g.rated = k.rate.tokensAt(now); g.rated {
			g.room = min(g.room, int(math.Floor(g.tokens)))
		}
		// Its share is counted whether or not it has room left now.
		left := k.turnLeft()
		share := min(left, room)
		took := min(share, room-before)
		before += share
		t.keys = append(t.keys, k.key)
		if took >= left {
			at := now.Add(time.Duration(i) * time.Microsecond)
			t.served, t.used = append(t.served, &at), append(t.used, 0)
		} else {
			t.served, t.used = append(t.served, nil), append(t.used, min(k.turnUsed, k.weight-1)+took)
		}
		if g.room > 0 {
			groups = append(groups, g)
		}
	}
	return groups, t
}

// routedPick reads each group's best due executions and takes them in
// rounds by weight, groups in turn order, at most room; the reads go in
// one round trip.
//
// Groups whose partitions are known (a keyed lane's turn) are read
// either one statement per group, naming its partitions, or one
// statement per shard holding any of their due work, for all of them:
// each a statement a distributed Postgres routes to the shards it names.
// The form of fewer statements (perShard) is taken. A key of strict order
// is read across the shards (its head is the lowest sequence of all of
// them).
func routedPick(ctx context.Context, tx pgx.Tx, lane string, caps []string, groups []routedGroup, room int) ([]routedCandidate, error) {
	b := &pgx.Batch{}
	found := make([][]routedCandidate, len(groups))
	var spread []groupPart
	for gi, g := range groups {
		if g.parts == nil || g.strict {
			queueGroupCandidates(b, lane, caps, groups, gi, nil, found)
			continue
		}
		for _, p := range g.parts {
			spread = append(spread, groupPart{group: gi, part: p})
		}
	}
	shards, err := byShard(ctx, tx, spread, func(x groupPart) int16 { return x.part })
	if err != nil {
		return nil, err
	}
	if perShard(shards) {
		for _, s := range shards {
			queueShardCandidates(b, lane, caps, groups, s, found)
		}
	} else {
		for gi, g := range groups {
			if g.parts != nil && !g.strict {
				queueGroupCandidates(b, lane, caps, groups, gi, g.parts, found)
			}
		}
	}
	if b.Len() == 0 {
		return nil, nil
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, err
	}
	return takeRounds(groups, found, room), nil
}

// perShard says whether the groups' due work (shards: by shard) is read
// one statement per shard rather than one per group: when that takes
// fewer statements, which it does with fewer shard reads too (each shard
// once, where the groups read each of their shards). A turn of many keys
// (100 keys of 1,000, say, on 32 shards) reads per shard; a few keys
// with work on every shard (a lane of four tenants) or one hot key read
// per key, as many statements as keys, each naming its key's partitions.
// Per shard also when it took fewer statements and shard reads counted
// together (each costs about the same on an idle cluster), the fault
// suite's lane of four tenants read 32 shards a claim where it had read 4
// keys, and did not drain in 3 minutes under faults (docs/scaling.md).
func perShard(shards []shardGroup[groupPart]) bool {
	groups := map[int]bool{}
	for _, s := range shards {
		for _, x := range s.items {
			groups[x.group] = true
		}
	}
	return len(shards) < len(groups)
}

// queueGroupCandidates queues the read of group gi's best due executions
// across the shards, or, given parts, on those partitions only.
func queueGroupCandidates(b *pgx.Batch, lane string, caps []string, groups []routedGroup, gi int, parts []int16, found [][]routedCandidate) {
	g := groups[gi]
	var key *string
	if g.key != "" {
		key = &g.key
	}
	var sql string
	switch {
	case g.strict:
		sql = routedStrictSQL
	case parts != nil:
		sql = routedCandidatesSQL[routedNarrowed|keyedIf(g.key)]
	default:
		sql = routedCandidatesSQL[keyedIf(g.key)]
	}
	args := []any{lane, caps, key, g.room}
	if parts != nil && !g.strict {
		args = append(args, parts)
	}
	b.Queue(sql, args...).Query(func(rows pgx.Rows) error {
		return scanCandidates(rows, func(int) int { return gi }, found)
	})
}

// keyedIf is routedKeyed for a key, 0 for the unkeyed group ("").
func keyedIf(key string) int {
	if key == "" {
		return 0
	}
	return routedKeyed
}

// groupPart is a partition holding due work of the group-th group.
type groupPart struct {
	group int
	part  int16
}

// queueShardCandidates queues the reads of one shard's best due
// executions of each group with due work there: one statement for the
// keys, one for the lane's unkeyed executions, each naming the shard's
// partitions.
func queueShardCandidates(b *pgx.Batch, lane string, caps []string, groups []routedGroup, s shardGroup[groupPart], found [][]routedCandidate) {
	var keys []string
	var rooms, which []int32
	seen := map[int]bool{}
	for _, x := range s.items {
		if seen[x.group] {
			continue
		}
		seen[x.group] = true
		g := groups[x.group]
		if g.key == "" {
			queueGroupCandidates(b, lane, caps, groups, x.group, s.parts, found)
			continue
		}
		keys, rooms, which = append(keys, g.key), append(rooms, int32(g.room)), append(which, int32(x.group))
	}
	if len(keys) > 0 {
		b.Queue(routedShardCandidatesSQL, lane, caps, keys, rooms, which, s.parts).Query(func(rows pgx.Rows) error {
			return scanCandidates(rows, func(i int) int { return i }, found)
		})
	}
}

// scanCandidates adds each row (a group's index, then the candidate's
// partition, id, priority and run_at) to found, under the group group
// names by that index.
func scanCandidates(rows pgx.Rows, group func(int) int, found [][]routedCandidate) error {
	for rows.Next() {
		var c routedCandidate
		var gi int32
		if err := rows.Scan(&gi, &c.id.Partition, &c.id.UUID, &c.priority, &c.runAt); err != nil {
			return err
		}
		g := group(int(gi))
		found[g] = append(found[g], c)
	}
	return rows.Err()
}

// takeRounds merges what each group's reads found into the group's best
// (the claim order: priority, then run_at, then id), at most its room,
// and takes them in rounds by weight, groups in turn order, at most room.
func takeRounds(groups []routedGroup, found [][]routedCandidate, room int) []routedCandidate {
	var all []routedCandidate
	for gi, cs := range found {
		g := groups[gi]
		slices.SortFunc(cs, func(a, b routedCandidate) int {
			if a.priority != b.priority {
				return cmp.Compare(b.priority, a.priority)
			}
			if c := a.runAt.Compare(b.runAt); c != 0 {
				return c
			}
			return bytes.Compare(a.id.UUID[:], b.id.UUID[:])
		})
		cs = cs[:min(len(cs), g.room)]
		for i := range cs {
			rn := i + 1
			cs[i].group, cs[i].rn, cs[i].key = gi, rn, g.key
			cs[i].round = (rn + g.weight - 1) / g.weight
		}
		all = append(all, cs...)
	}
	slices.SortStableFunc(all, func(a, b routedCandidate) int {
		if a.round != b.round {
			return cmp.Compare(a.round, b.round)
		}
		if a.group != b.group {
			return cmp.Compare(a.group, b.group)
		}
		return cmp.Compare(a.rn, b.rn)
	})
	return all[:min(len(all), room)]
}

// routedSpend takes the tokens of what was claimed from the lane's bucket
// and from each rate-limited key's.
func routedSpend(ctx context.Context, tx pgx.Tx, lane string, l routedLane, laneRated bool, laneTokens float64,
	groups []routedGroup, out []*ffdtype.Execution, now time.Time) error {
	if len(out) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	if laneRated {
		b.Queue(`UPDATE ff_lane_room SET tokens = $2, tokens_at = $3 WHERE lane = $1`, lane, laneTokens-float64(len(out)), now)
	}
	taken := map[string]int{}
	for _, x := range out {
		taken[x.ConcurrencyKey]++
	}
	var keys []string
	var tokens []float64
	for _, g := range groups {
		if g.rated && taken[g.key] > 0 {
			keys, tokens = append(keys, g.key), append(tokens, g.tokens-float64(taken[g.key]))
		}
	}
	if len(keys) > 0 {
		// One statement for every key, as the turns (keyTurnsSQL).
		b.Queue(`UPDATE ff_key k SET tokens = t.tokens, tokens_at = $3
			FROM unnest($2::text[], $4::float8[]) AS t(key, tokens)
			WHERE k.lane = $1 AND k.key = ANY($2::text[]) AND k.key = t.key`, lane, keys, now, tokens)
	}
	if b.Len() == 0 {
		return nil
	}
	return tx.SendBatch(ctx, b).Close()
}

// claimThrottleRouted is ClaimThrottle on a distributed Postgres: the
// same answer from separate reads, in one round trip (the time, the keys
// with due work, the lane's row and room, its rate-limited keys).
func claimThrottleRouted(ctx context.Context, db DB, lane string, caps []string) (Throttle, error) {
	var t Throttle
	var now time.Time
	var due map[string][]int16
	var l routedLane
	var laneFound bool
	var keys []routedKey
	b := &pgx.Batch{}
	b.Queue(`SELECT now()`).QueryRow(func(row pgx.Row) error { return row.Scan(&now) })
	b.Queue(routedDueKeysSQL, lane, caps).Query(func(rows pgx.Rows) error {
		var err error
		due, err = scanDueKeys(rows)
		return err
	})
	b.Queue(routedLaneSQL, lane).QueryRow(func(row pgx.Row) error {
		err := row.Scan(&l.paused, &l.keyed, &l.maxRunning, &l.rate.count, &l.rate.perUS, &l.rate.burst)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		laneFound = err == nil
		return err
	})
	b.Queue(routedRoomSQL, lane).Query(scanRoom(&l.rate))
	b.Queue(`SELECT `+routedKeyColumns+` FROM ff_key WHERE lane = $1 AND rate_count IS NOT NULL`, lane).Query(func(rows pgx.Rows) error {
		var err error
		keys, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (routedKey, error) { return scanRoutedKey(row) })
		return err
	})
	if err := db.SendBatch(ctx, b).Close(); err != nil || len(due) == 0 {
		return t, err
	}
	t.Held = true
	if !laneFound {
		return t, nil
	}
	t.Retry = l.rate.wait(now)
	for _, k := range keys {
		if due[k.key] == nil {
			continue
		}
		if w := k.rate.wait(now); w > 0 && (t.Retry == 0 || w < t.Retry) {
			t.Retry = w
		}
	}
	return t, nil
}
