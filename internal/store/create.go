package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/ident"
)

// NewExecution is one execution to insert, every column's value decided
// (ids minted, defaults applied, input validated) by the caller.
type NewExecution struct {
	ID                   ffdtype.ExecutionID
	FlowID               *uuid.UUID
	Namespace            string
	Lane                 string
	Kind                 string
	Priority             int
	RequiredCapabilities []string
	State                ffdtype.State // pending or blocked
	Delay                time.Duration // run_at = now() + Delay
	MaxAttempts          int
	Retry                ffdtype.RetryPolicy
	LeaseTTL             time.Duration
	AttemptTimeout       time.Duration // 0: none
	Deadline             time.Duration // 0: none; else deadline_at = now() + Deadline
	Payload              []byte
	IdempotencyKey       string // "": none
	Tags                 map[string]any
	Step                 string // "": none; flow members only
	// UniqueKey, when set, is held while the execution is live
	// (UniqueWhileLive) or, already suffixed with its window's start, for
	// that window.
	UniqueKey       string
	UniqueWhileLive bool
	// ConcurrencyKey ("": none) and ConcurrencyLimit (0: the key's limit
	// unchanged): docs/flow-control.md. The insert makes sure the key and
	// its lane are known to the claim first (EnsureKeys).
	ConcurrencyKey   string
	ConcurrencyLimit int
	// Debounce, when set (checked, its mode filled), creates through
	// InsertDebounced.
	Debounce *ffdtype.Debounce
	// KeySeq is the execution's place in its key of strict order, set by
	// EnsureKeys; nil for any other.
	KeySeq *int64
}

// insertColumns and insertValues are one execution's row: $1..$26. A
// parameter bound for a column of a domain type (migration 00045) is cast
// to the domain's own type: a client learns the parameter's type from the
// server, and pgx encodes no value for a type it does not know. The tags
// are cast too, so that this release keeps creating executions if a later
// one checks them by a domain (releases before 00045 bind them uncast,
// which is why 00045 leaves their check on the table).
const (
	insertColumns = `INSERT INTO ff_execution AS e (partition_key, execution_id, flow_id, namespace, lane, kind, priority,
	required_capabilities, state, run_at, max_attempts, backoff_base, backoff_max, backoff_multiplier,
	backoff_jitter, lease_ttl, attempt_timeout, deadline_at, payload, idempotency_key, tags, step,
	unique_key, unique_while_live, concurrency_key, key_seq)`
	insertValues = `$1, $2, $3, $4, $5, $6, $7, $8, $9,
	now() + $10::bigint * interval '1 microsecond', $11::integer,
	$12::bigint * interval '1 microsecond', $13::bigint * interval '1 microsecond', $14::float8, $15::float8,
	$16::bigint * interval '1 microsecond',
	CASE WHEN $17::bigint > 0 THEN $17::bigint * interval '1 microsecond' END,
	CASE WHEN $18::bigint > 0 THEN now() + $18::bigint * interval '1 microsecond' END,
	$19, $20, $21::jsonb, $22, $23, CASE WHEN $23::text IS NOT NULL THEN $24::boolean END, $25, $26`
)

// insertExecutionSQL inserts an execution without an idempotency key.
const insertExecutionSQL = insertColumns + `
VALUES (` + insertValues + `)
RETURNING ` + execColumns

// insertKeyedSQL inserts an execution with an idempotency key, or nothing
// when the key is held: by a row on the key's partition (the unique index,
// which the caller placed the row beside), or by an execution created
// before keys were placed, remembered in ff_idempotency_legacy.
const insertKeyedSQL = insertColumns + `
SELECT ` + insertValues + `
WHERE NOT EXISTS (SELECT 1 FROM ff_idempotency_legacy l WHERE l.namespace = $4 AND l.idempotency_key = $20)
ON CONFLICT (partition_key, namespace, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING ` + execColumns

// keyHolderSQL reads the execution holding an idempotency key: on the
// key's partition, or where ff_idempotency_legacy says.
const keyHolderSQL = `SELECT ` + execColumns + ` FROM ff_execution e
	WHERE e.partition_key = $3 AND e.namespace = $1 AND e.idempotency_key = $2
UNION ALL
SELECT ` + execColumns + ` FROM ff_idempotency_legacy l
	JOIN ff_execution e ON e.partition_key = l.partition_key AND e.execution_id = l.execution_id
	WHERE l.namespace = $1 AND l.idempotency_key = $2
LIMIT 1`

// InsertExecution inserts one execution. When its idempotency key is
// already used in the namespace it inserts nothing and returns the
// execution holding the key, with existed = true. A row with a key must be
// placed on the key's partition (ident.NewExecutionIDForKey).
func InsertExecution(ctx context.Context, db DB, r NewExecution) (x *ffdtype.Execution, existed bool, err error) {
	if r.ConcurrencyKey != "" && !inCallerTx(db) {
		// The key is recorded in the creating transaction (withKeys).
		err = InTx(ctx, db, func(tx pgx.Tx) error {
			x, existed, err = InsertExecution(ctx, tx, r)
			return err
		})
		return x, existed, err
	}
	rs := []NewExecution{r}
	if err := EnsureKeys(ctx, db, rs); err != nil {
		return nil, false, err
	}
	r = rs[0] // with its place, in a key of strict order
	args := []any{r.ID.Partition, r.ID.UUID, r.FlowID, r.Namespace, r.Lane, r.Kind, r.Priority,
		r.RequiredCapabilities, string(r.State), micros(r.Delay), r.MaxAttempts, micros(r.Retry.Base),
		micros(r.Retry.Max), r.Retry.Multiplier, r.Retry.Jitter, micros(r.LeaseTTL), micros(r.AttemptTimeout),
		micros(r.Deadline), r.Payload, nullIfEmpty(r.IdempotencyKey), r.Tags, nullIfEmpty(r.Step),
		nullIfEmpty(r.UniqueKey), r.UniqueWhileLive, nullIfEmpty(r.ConcurrencyKey), r.KeySeq}
	if r.UniqueKey != "" {
		if want := ident.KeyPartition(r.Namespace, r.UniqueKey); r.ID.Partition != want {
			return nil, false, fmt.Errorf("create execution with unique key %q: placed on partition %d, want the key's %d", r.UniqueKey, r.ID.Partition, want)
		}
		return insertUnique(ctx, db, r, args)
	}
	sql := insertExecutionSQL
	if r.IdempotencyKey != "" {
		if want := ident.KeyPartition(r.Namespace, r.IdempotencyKey); r.ID.Partition != want {
			// Elsewhere the key's unique index could not see its holders.
			return nil, false, fmt.Errorf("create execution with idempotency key %q: placed on partition %d, want the key's %d", r.IdempotencyKey, r.ID.Partition, want)
		}
		sql = insertKeyedSQL
	}
	notices := readyNotices(r)
	err = WithRetry(ctx, db, func() error {
		return queryNotifying(ctx, db, notices, func(rows pgx.Rows) error {
			x, err = oneExecution(rows, nil)
			return err
		}, sql, args...)
	})
	if err == nil {
		return x, false, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, false, wrap("create execution in lane "+r.Lane, err)
	}
	// The key is taken: return its holder.
	x, err = oneExecution(db.Query(ctx, keyHolderSQL, r.Namespace, r.IdempotencyKey, r.ID.Partition))
	if err != nil {
		return nil, false, wrap("read execution by idempotency key "+r.IdempotencyKey, err)
	}
	return x, true, nil
}

// insertUnique inserts an execution with a unique key in a savepoint (a
// transaction of its own on a pool), so that a held key aborts nothing of
// the caller's, and returns the holder when the key is held. A holder that
// ends between the refusal and the read freed the key: try again. Under
// churn on one key that can repeat, but each round means another creator
// took the key and let it go, so it ends: with the new execution, with
// the holder, or with ctx's error, never with "no holder".
func insertUnique(ctx context.Context, db DB, r NewExecution, args []any) (*ffdtype.Execution, bool, error) {
	backoff := time.Millisecond
	for try := 1; ; try++ {
		if h := uniqueRaceHook.Load(); h != nil {
			h.beforeInsert(r.UniqueKey)
		}
		var x *ffdtype.Execution
		err := InTx(ctx, db, func(tx pgx.Tx) error {
			return queryNotifying(ctx, tx, readyNotices(r), func(rows pgx.Rows) error {
				var err error
				x, err = oneExecution(rows, nil)
				return err
			}, insertExecutionSQL, args...)
		})
		switch {
		case err == nil:
			return x, false, nil
		case !IsUniqueTaken(err):
			return nil, false, wrap("create execution in lane "+r.Lane, err)
		}
		if h := uniqueRaceHook.Load(); h != nil {
			h.afterRefused(r.UniqueKey)
		}
		x, err = UniqueHolder(ctx, db, r.ID.Partition, r.Namespace, r.UniqueKey)
		if err == nil {
			return x, true, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return nil, false, wrap("read the holder of unique key "+r.UniqueKey, err)
		}
		if try > 3 {
			// Hot churn on this key: let the others' rounds finish.
			select {
			case <-ctx.Done():
				return nil, false, wrap(fmt.Sprintf("create execution with unique key %q (held and released %d times meanwhile)", r.UniqueKey, try), ctx.Err())
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 20*time.Millisecond)
		}
	}
}

// uniqueRaceHook, set only by tests, steps into the window between a
// refused insert and the read of the key's holder.
var uniqueRaceHook atomic.Pointer[uniqueRace]

type uniqueRace struct {
	beforeInsert, afterRefused func(key string)
}

// IsUniqueTaken reports an insert refused because its unique key is held
// (ff_execution_unique_live or ff_execution_unique_window).
func IsUniqueTaken(err error) bool {
	return refusedBy(err, "23505", "ff_execution_unique_live", "ff_execution_unique_window")
}

// UniqueHolder reads the execution holding a unique key (as stored) on
// the key's partition, or pgx.ErrNoRows.
func UniqueHolder(ctx context.Context, db DB, partition int16, namespace, key string) (*ffdtype.Execution, error) {
	return oneExecution(db.Query(ctx, `SELECT `+execColumns+` FROM ff_execution e
		WHERE e.partition_key = $3 AND e.namespace = $1 AND e.unique_key = $2
			AND (NOT e.unique_while_live OR e.state IN ('blocked', 'pending', 'running'))
		LIMIT 1`, namespace, key, partition))
}

// insertManyColumns are the columns a batch insert writes.
const insertManyColumns = `INSERT INTO ff_execution AS e (partition_key, execution_id, flow_id, namespace, lane, kind, priority,
	required_capabilities, state, run_at, max_attempts, backoff_base, backoff_max, backoff_multiplier,
	backoff_jitter, lease_ttl, attempt_timeout, deadline_at, payload, tags, step, concurrency_key, key_seq)`

// insertManyRow is a batch row's values from its input i (insertInput): the
// one place both forms of the batch insert take them from, but for the
// capabilities (capsFromJSON).
const insertManyRow = `i.partition_key, i.execution_id, i.flow_id, i.namespace, i.lane, i.kind, i.priority,
	` + capsFromJSON + `, i.state,
	now() + i.delay * interval '1 microsecond', i.max_attempts,
	i.base * interval '1 microsecond', i.max_backoff * interval '1 microsecond', i.multiplier, i.jitter,
	i.ttl * interval '1 microsecond',
	CASE WHEN i.timeout > 0 THEN i.timeout * interval '1 microsecond' END,
	CASE WHEN i.deadline > 0 THEN now() + i.deadline * interval '1 microsecond' END,
	i.payload, i.tags, nullif(i.step, ''), nullif(i.ckey, ''), i.seq`

// capsFromJSON is a row's capabilities from the arrays' form, where they
// travel as a JSON array (Postgres arrays cannot be ragged). The VALUES
// form passes each row's as an array of its own: Citus refuses a
// subquery in an INSERT's VALUES.
const capsFromJSON = `ARRAY(SELECT jsonb_array_elements_text(i.caps))`

// insertInput is a batch row's input, in the order of its parameters:
// each field's name in insertManyRow and its type.
var insertInput = [...]struct{ name, typ string }{
	{"partition_key", "smallint"}, {"execution_id", "uuid"}, {"flow_id", "uuid"}, {"namespace", "text"},
	{"lane", "text"}, {"kind", "text"}, {"priority", "int"}, {"caps", "jsonb"}, {"state", "text"},
	{"delay", "bigint"}, {"max_attempts", "int"}, {"base", "bigint"}, {"max_backoff", "bigint"},
	{"multiplier", "float8"}, {"jitter", "float8"}, {"ttl", "bigint"}, {"timeout", "bigint"},
	{"deadline", "bigint"}, {"payload", "bytea"}, {"tags", "jsonb"}, {"step", "text"}, {"ckey", "text"},
	{"seq", "bigint"},
}

// insertManySQL inserts a batch in one statement from one array per
// input field. Cross-partition: each row goes to its own partition.
var insertManySQL = func() string {
	arrays, names := make([]string, len(insertInput)), make([]string, len(insertInput))
	for k, in := range insertInput {
		arrays[k], names[k] = fmt.Sprintf("$%d::%s[]", k+1, in.typ), in.name
	}
	return insertManyColumns + `
SELECT ` + insertManyRow + `
FROM unnest(` + strings.Join(arrays, ", ") + `)
	AS i(` + strings.Join(names, ", ") + `)
RETURNING ` + execColumns
}()

// insertValuesSQL is the batch insert of n rows in its form for a
// distributed Postgres: a VALUES row each, its fields parameters in turn
// ($1..$23 the first row's; its capabilities a text[]). Citus routes such
// an insert to the shards of its rows, where it runs an INSERT ... SELECT
// from arrays by pulling the rows to the node the session is on and
// copying them out to the shard: the step of a flow of one step took 7.2
// ms that way, 1.4 ms this way (the flow's own row: 0.7 ms).
func insertValuesSQL(n int) string {
	if sql, ok := insertValuesCache.Load(n); ok {
		return sql.(string)
	}
	var b strings.Builder
	b.WriteString(insertManyColumns + "\nVALUES ")
	for r := range n {
		if r > 0 {
			b.WriteString(",\n")
		}
		row := strings.Replace(insertManyRow, capsFromJSON, "i.caps", 1)
		b.WriteString("(" + insertInputRef.ReplaceAllStringFunc(row, func(ref string) string {
			k := inputIndex(ref[2:])
			typ := insertInput[k].typ
			if ref == "i.caps" {
				typ = "text[]"
			}
			return fmt.Sprintf("$%d::%s", r*len(insertInput)+k+1, typ)
		}) + ")")
	}
	b.WriteString("\nRETURNING " + execColumns)
	sql, _ := insertValuesCache.LoadOrStore(n, b.String())
	return sql.(string)
}

// inputIndex is the place of the field name in insertInput.
func inputIndex(name string) int {
	return slices.IndexFunc(insertInput[:], func(in struct{ name, typ string }) bool { return in.name == name })
}

var (
	insertInputRef    = regexp.MustCompile(`\bi\.[a-z_]+`)
	insertValuesCache sync.Map // n → insertValuesSQL(n)
)

// CopyThreshold is the batch size from which InsertExecutions writes by
// COPY: below it, the one-statement insert (one round trip) is cheaper
// than COPY's three (the database's now(), the COPY, the commit), and
// from it on COPY's cheaper rows win (docs/benchmarks.md, "Enqueue").
const CopyThreshold = 64

// InsertExecutions inserts rows and returns them in their order:
// batches of CopyThreshold or more by COPY, smaller ones in one
// statement. Idempotency and unique keys are ignored: the caller refuses
// them.
func InsertExecutions(ctx context.Context, db DB, rs []NewExecution) ([]*ffdtype.Execution, error) {
	var out []*ffdtype.Execution
	err := withKeys(ctx, db, rs, func(db DB) error {
		var err error
		if len(rs) >= CopyThreshold {
			out, err = copyExecutions(ctx, db, rs)
		} else {
			out, err = insertExecutions(ctx, db, rs)
		}
		return err
	})
	return out, err
}

// insertExecutions inserts rows in one statement.
func insertExecutions(ctx context.Context, db DB, rs []NewExecution) ([]*ffdtype.Execution, error) {
	n := len(rs)
	var (
		parts                     = make([]int16, n)
		ids, flowIDs              = make([]pgtype.UUID, n), make([]pgtype.UUID, n)
		namespaces, lanes, kinds  = make([]string, n), make([]string, n), make([]string, n)
		states                    = make([]string, n)
		priorities, maxAttempts   = make([]int32, n), make([]int32, n)
		caps, tags                = make([]string, n), make([]*map[string]any, n)
		delays, bases, maxes      = make([]int64, n), make([]int64, n), make([]int64, n)
		ttls, timeouts, deadlines = make([]int64, n), make([]int64, n), make([]int64, n)
		multipliers, jitters      = make([]float64, n), make([]float64, n)
		payloads, steps           = make([][]byte, n), make([]string, n)
		ckeys                     = make([]string, n)
		seqs                      = make([]*int64, n)
		order                     = make(map[uuid.UUID]int, n)
	)
	for i := range rs {
		r := &rs[i]
		parts[i], ids[i], flowIDs[i] = r.ID.Partition, pgUUID(r.ID.UUID), pgUUIDOrNull(r.FlowID)
		order[r.ID.UUID] = i
		namespaces[i], lanes[i], kinds[i], states[i] = r.Namespace, r.Lane, r.Kind, string(r.State)
		priorities[i], maxAttempts[i] = int32(r.Priority), int32(r.MaxAttempts)
		var err error
		b, err := json.Marshal(r.RequiredCapabilities)
		if err != nil {
			return nil, fmt.Errorf("encode capabilities: %w", err)
		}
		caps[i] = string(b)
		if r.Tags != nil {
			tags[i] = &r.Tags
		}
		delays[i], bases[i], maxes[i] = micros(r.Delay), micros(r.Retry.Base), micros(r.Retry.Max)
		multipliers[i], jitters[i] = r.Retry.Multiplier, r.Retry.Jitter
		ttls[i], timeouts[i], deadlines[i] = micros(r.LeaseTTL), micros(r.AttemptTimeout), micros(r.Deadline)
		payloads[i], steps[i], ckeys[i], seqs[i] = r.Payload, r.Step, r.ConcurrencyKey, r.KeySeq
	}
	// In insertInput's order.
	sql, args := insertManySQL, []any{parts, ids, flowIDs, namespaces, lanes, kinds, priorities,
		caps, states, delays, maxAttempts, bases, maxes, multipliers, jitters, ttls, timeouts, deadlines, payloads, tags, steps, ckeys, seqs}
	if dist, err := Distributed(ctx, db); err != nil {
		return nil, err
	} else if dist {
		lists := make([][]string, n)
		for i := range rs {
			lists[i] = append([]string{}, rs[i].RequiredCapabilities...)
		}
		args[inputIndex("caps")] = lists
		sql, args = insertValuesSQL(n), byRow(n, args)
	}
	out := make([]*ffdtype.Execution, n)
	notices := readyNotices(rs...)
	err := WithRetry(ctx, db, func() error {
		var xs []*ffdtype.Execution
		err := queryNotifying(ctx, db, notices, func(rows pgx.Rows) error {
			var err error
			xs, err = collectExecutions(rows)
			return err
		}, sql, args...)
		if err != nil {
			return err
		}
		for _, x := range xs {
			i, ok := order[x.ID.UUID]
			if !ok {
				return fmt.Errorf("inserted an execution %s that was not asked for", x.ID)
			}
			out[i] = x
		}
		if got := len(xs); got != n {
			return fmt.Errorf("inserted %d of %d executions", got, n)
		}
		return nil
	})
	if err != nil {
		return nil, wrap(fmt.Sprintf("create %d executions", n), err)
	}
	return out, nil
}

// byRow turns the arrays of a batch of n rows, one per input field, into
// the parameters of its VALUES form: each row's fields in turn.
func byRow(n int, arrays []any) []any {
	args := make([]any, 0, n*len(arrays))
	for r := range n {
		for _, a := range arrays {
			args = append(args, reflect.ValueOf(a).Index(r).Interface())
		}
	}
	return args
}

// copyColumns are the columns copyExecutions writes; the others take
// their defaults (attempt 0, lease_epoch 0, no lease, no result).
var copyColumns = []string{"partition_key", "execution_id", "flow_id", "namespace", "lane", "kind", "priority",
	"required_capabilities", "state", "run_at", "created_at", "max_attempts", "backoff_base", "backoff_max",
	"backoff_multiplier", "backoff_jitter", "lease_ttl", "attempt_timeout", "deadline_at", "payload", "tags", "step",
	"concurrency_key"}

// copyExecutions writes rows by COPY, in a transaction (the caller's, or
// one of its own) whose now() it reads first: every time the insert
// statement computes in the database (created_at, run_at and deadline_at
// from now()) is computed from that same now() here, so the rows are
// those the statement would write, and the executions it returns are
// built from what was written, without reading it back.
func copyExecutions(ctx context.Context, db DB, rs []NewExecution) ([]*ffdtype.Execution, error) {
	var out []*ffdtype.Execution
	// Places in strict keys go as a column of their own, only in a batch
	// that has some: other batches copy what they always did.
	columns, placed := copyColumns, false
	for i := range rs {
		if rs[i].KeySeq != nil {
			columns, placed = append(slices.Clip(copyColumns), "key_seq"), true
			break
		}
	}
	write := func(tx pgx.Tx) error {
		// The notices go with the read of now(): a transaction's
		// notifications are sent at its commit, wherever it queued them,
		// and not at all if it rolls back.
		var now time.Time
		b := &pgx.Batch{}
		b.Queue(`SELECT now()`).QueryRow(func(row pgx.Row) error { return row.Scan(&now) })
		readyNotices(rs...).Queue(b)
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		out = make([]*ffdtype.Execution, len(rs))
		// Rows are built as COPY asks for them: pgx encodes them on a
		// goroutine of its own while it sends what it has, so building
		// a row overlaps with the server's work on the rows before it.
		i := 0
		src := pgx.CopyFromFunc(func() ([]any, error) {
			if i == len(rs) {
				return nil, nil
			}
			x, row, err := rs[i].copyRow(now)
			if err != nil {
				return nil, err
			}
			if placed {
				row = append(row, rs[i].KeySeq)
			}
			out[i] = x
			i++
			return row, nil
		})
		n, err := tx.CopyFrom(ctx, pgx.Identifier{"ff_execution"}, columns, src)
		if err == nil && n != int64(len(rs)) {
			err = fmt.Errorf("copied %d of %d executions", n, len(rs))
		}
		return err
	}
	var err error
	if tx, ok := db.(pgx.Tx); ok {
		err = write(tx) // the caller's transaction: no savepoint needed, it fails whole
	} else {
		err = InTx(ctx, db, write)
	}
	if err != nil {
		return nil, wrap(fmt.Sprintf("copy %d executions", len(rs)), err)
	}
	return out, nil
}

// copyRow is r's COPY row and the execution it makes, at the database
// time now.
func (r *NewExecution) copyRow(now time.Time) (*ffdtype.Execution, []any, error) {
	tags := map[string]any{}
	if len(r.Tags) > 0 {
		// As the database will hand them back: through JSON (numbers as
		// float64).
		b, err := json.Marshal(r.Tags)
		if err != nil {
			return nil, nil, fmt.Errorf("encode tags: %w", err)
		}
		if err := json.Unmarshal(b, &tags); err != nil {
			return nil, nil, fmt.Errorf("decode tags: %w", err)
		}
	}
	// Durations travel in microseconds, as the statement's do.
	us := func(d time.Duration) time.Duration { return time.Duration(micros(d)) * time.Microsecond }
	interval := func(d time.Duration) pgtype.Interval {
		return pgtype.Interval{Microseconds: micros(d), Valid: true}
	}
	x := &ffdtype.Execution{ID: r.ID, FlowID: r.FlowID, Namespace: r.Namespace, Lane: r.Lane, Kind: r.Kind,
		Priority: r.Priority, RequiredCapabilities: r.RequiredCapabilities, Version: ffdtype.VersionOf(r.RequiredCapabilities), State: r.State,
		RunAt: now.Add(us(r.Delay)), MaxAttempts: r.MaxAttempts,
		Retry:    ffdtype.RetryPolicy{Base: us(r.Retry.Base), Max: us(r.Retry.Max), Multiplier: r.Retry.Multiplier, Jitter: r.Retry.Jitter},
		LeaseTTL: us(r.LeaseTTL), Payload: r.Payload, CreatedAt: now, Tags: tags, Step: r.Step,
		ConcurrencyKey: r.ConcurrencyKey}
	if x.RequiredCapabilities == nil {
		x.RequiredCapabilities = []string{}
	}
	if x.Payload == nil {
		x.Payload = []byte{}
	}
	var timeout any
	if r.AttemptTimeout > 0 {
		x.AttemptTimeout = us(r.AttemptTimeout)
		timeout = interval(r.AttemptTimeout)
	}
	if r.Deadline > 0 {
		d := now.Add(us(r.Deadline))
		x.DeadlineAt = &d
	}
	row := []any{r.ID.Partition, pgUUID(r.ID.UUID), pgUUIDOrNull(r.FlowID), r.Namespace, r.Lane, r.Kind, int32(r.Priority),
		x.RequiredCapabilities, string(r.State), x.RunAt, now, int32(r.MaxAttempts), interval(r.Retry.Base),
		interval(r.Retry.Max), r.Retry.Multiplier, r.Retry.Jitter, interval(r.LeaseTTL), timeout, x.DeadlineAt,
		x.Payload, tags, nullIfEmpty(r.Step), nullIfEmpty(r.ConcurrencyKey)}
	return x, row, nil
}
