package leases

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/internal/fault"
	"github.com/flowfabric/ffd/internal/ident"
	"github.com/flowfabric/ffd/internal/store"
)

// Defaults for CreateParams' zero values (docs/design.md section 6).
const (
	DefaultNamespace       = "default"
	DefaultMaxAttempts     = 5
	DefaultLeaseTTL        = 30 * time.Second
	DefaultBackoffBase     = time.Second
	DefaultBackoffMax      = 5 * time.Minute
	DefaultBackoffFactor   = 2.0
	DefaultBackoffJitter   = 0.1
	DefaultMaxPayloadBytes = 1 << 20
)

// Bounds on inputs; anything outside is refused as absurd (docs/design.md section 11).
const (
	MaxMaxAttempts      = 1000
	MinLeaseTTL         = time.Second
	MaxLeaseTTL         = 24 * time.Hour
	MaxAttemptTimeout   = 7 * 24 * time.Hour
	MaxDelay            = 365 * 24 * time.Hour
	MaxDeadline         = 365 * 24 * time.Hour
	MaxBackoff          = 7 * 24 * time.Hour
	MaxCapabilities     = 64
	MaxNameLength       = 128
	MaxKindLength       = 256
	MaxIdempotencyKey   = 512
	MaxBackoffFactor    = 100.0
	maxCapabilityLength = 128
)

var namePattern = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,128}$`)

// CreateParams describes a new execution. Zero values take the defaults
// above.
type CreateParams struct {
	Namespace            string
	Lane                 string
	Kind                 string
	Payload              []byte
	Priority             int
	RequiredCapabilities []string
	MaxAttempts          int
	Retry                RetryPolicy
	LeaseTTL             time.Duration
	AttemptTimeout       time.Duration // 0: attempts may run as long as they heartbeat
	Deadline             time.Duration // 0: none; else expires this long after creation
	Delay                time.Duration // claimable this long after creation
	IdempotencyKey       string
	Tags                 map[string]any

	// Set by flow operations: the execution is minted on the flow's
	// partition, and starts blocked when it waits on an edge group.
	FlowID    *uuid.UUID
	Partition *int16
	Blocked   bool
}

// Limits are the configurable input limits.
type Limits struct {
	MaxPayloadBytes int // default DefaultMaxPayloadBytes
}

func (l Limits) maxPayload() int {
	if l.MaxPayloadBytes <= 0 {
		return DefaultMaxPayloadBytes
	}
	return l.MaxPayloadBytes
}

// ValidateName checks a lane or namespace.
func ValidateName(field, v string) error {
	if !namePattern.MatchString(v) {
		return fault.Invalid(fault.KindInvalidValue, field, v, "want 1 to 128 characters of A-Z a-z 0-9 _ . : -")
	}
	return nil
}

// Normalize fills defaults and validates; it touches no database, so bad
// input writes nothing. Normalizing twice is harmless.
func (p *CreateParams) Normalize(lim Limits) error {
	if p.Namespace == "" {
		p.Namespace = DefaultNamespace
	}
	if err := ValidateName("namespace", p.Namespace); err != nil {
		return err
	}
	if p.Lane == "" {
		return fault.Invalid(fault.KindRequired, "lane", "", "a lane is required")
	}
	if err := ValidateName("lane", p.Lane); err != nil {
		return err
	}
	if err := ValidateText("kind", p.Kind, MaxKindLength); err != nil {
		return err
	}
	if len(p.Payload) > lim.maxPayload() {
		return fault.Invalid(fault.KindTooLarge, "payload", strconv.Itoa(len(p.Payload))+" bytes",
			fmt.Sprintf("at most %d bytes", lim.maxPayload()))
	}
	if p.Priority < -1<<31 || p.Priority > 1<<31-1 {
		return fault.Invalid(fault.KindOutOfRange, "priority", strconv.Itoa(p.Priority), "want a 32-bit integer")
	}
	if err := validateCapabilities("required_capabilities", p.RequiredCapabilities); err != nil {
		return err
	}
	if p.MaxAttempts == 0 {
		p.MaxAttempts = DefaultMaxAttempts
	}
	if p.MaxAttempts < 1 || p.MaxAttempts > MaxMaxAttempts {
		return fault.Invalid(fault.KindOutOfRange, "max_attempts", strconv.Itoa(p.MaxAttempts), fmt.Sprintf("want 1..%d", MaxMaxAttempts))
	}
	if err := p.Retry.normalize(); err != nil {
		return err
	}
	if p.LeaseTTL == 0 {
		p.LeaseTTL = DefaultLeaseTTL
	}
	if p.LeaseTTL < MinLeaseTTL || p.LeaseTTL > MaxLeaseTTL {
		return fault.Invalid(fault.KindOutOfRange, "lease_ttl", p.LeaseTTL.String(), fmt.Sprintf("want %s..%s", MinLeaseTTL, MaxLeaseTTL))
	}
	if p.AttemptTimeout < 0 || p.AttemptTimeout > MaxAttemptTimeout || (p.AttemptTimeout > 0 && p.AttemptTimeout < time.Millisecond) {
		return fault.Invalid(fault.KindOutOfRange, "attempt_timeout", p.AttemptTimeout.String(), fmt.Sprintf("want 0 (none) or 1ms..%s", MaxAttemptTimeout))
	}
	if p.Deadline < 0 || p.Deadline > MaxDeadline || (p.Deadline > 0 && p.Deadline < time.Millisecond) {
		return fault.Invalid(fault.KindOutOfRange, "deadline", p.Deadline.String(), fmt.Sprintf("want 0 (none) or 1ms..%s", MaxDeadline))
	}
	if p.Delay < 0 || p.Delay > MaxDelay {
		return fault.Invalid(fault.KindOutOfRange, "delay", p.Delay.String(), fmt.Sprintf("want 0..%s", MaxDelay))
	}
	if err := ValidateText("idempotency_key", p.IdempotencyKey, MaxIdempotencyKey); err != nil {
		return err
	}
	if p.Tags != nil {
		b, err := json.Marshal(p.Tags)
		if err != nil {
			return fault.Invalid(fault.KindInvalidValue, "tags", fmt.Sprint(p.Tags), "must encode as a JSON object: "+err.Error())
		}
		if len(b) > MaxTagsBytes {
			return fault.Invalid(fault.KindTooLarge, "tags", strconv.Itoa(len(b))+" bytes", fmt.Sprintf("at most %d bytes of JSON", MaxTagsBytes))
		}
		if err := validateJSONText("tags", b); err != nil {
			return err
		}
		// encoding/json silently replaces invalid UTF-8; refuse it instead
		// of storing something other than what was given.
		if err := validateTagValue(p.Tags); err != nil {
			return err
		}
	} else {
		p.Tags = map[string]any{}
	}
	return nil
}

func validateCapabilities(field string, caps []string) error {
	if len(caps) > MaxCapabilities {
		return fault.Invalid(fault.KindTooLarge, field, strconv.Itoa(len(caps))+" capabilities", fmt.Sprintf("at most %d", MaxCapabilities))
	}
	for _, c := range caps {
		if c == "" || len(c) > maxCapabilityLength {
			return fault.Invalid(fault.KindInvalidValue, field, c, fmt.Sprintf("each capability is 1 to %d bytes", maxCapabilityLength))
		}
		if err := ValidateText(field, c, 0); err != nil {
			return err
		}
	}
	return nil
}

func (r *RetryPolicy) normalize() error {
	if r.Base == 0 {
		r.Base = DefaultBackoffBase
	}
	if r.Max == 0 {
		r.Max = max(DefaultBackoffMax, r.Base)
	}
	if r.Multiplier == 0 {
		r.Multiplier = DefaultBackoffFactor
	}
	if r.Jitter == 0 {
		r.Jitter = DefaultBackoffJitter
	}
	switch {
	case r.Base < time.Millisecond || r.Base > MaxBackoff:
		return fault.Invalid(fault.KindOutOfRange, "retry.base", r.Base.String(), fmt.Sprintf("want 1ms..%s", MaxBackoff))
	case r.Max < r.Base || r.Max > MaxBackoff:
		return fault.Invalid(fault.KindOutOfRange, "retry.max", r.Max.String(), fmt.Sprintf("want retry.base..%s", MaxBackoff))
	// Written as negated ranges so that NaN, which fails every
	// comparison, is refused too.
	case !(r.Multiplier >= 1 && r.Multiplier <= MaxBackoffFactor):
		return fault.Invalid(fault.KindOutOfRange, "retry.multiplier", strconv.FormatFloat(r.Multiplier, 'g', -1, 64), "want 1..100")
	case !(r.Jitter >= 0 && r.Jitter <= 1):
		return fault.Invalid(fault.KindOutOfRange, "retry.jitter", strconv.FormatFloat(r.Jitter, 'g', -1, 64), "want 0..1")
	}
	return nil
}

const insertSQL = `
INSERT INTO ff_execution AS e (partition_key, execution_id, flow_id, namespace, lane, kind, priority,
	required_capabilities, state, run_at, max_attempts, backoff_base, backoff_max, backoff_multiplier,
	backoff_jitter, lease_ttl, attempt_timeout, deadline_at, payload, idempotency_key, tags)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9,
	now() + $10::bigint * interval '1 microsecond', $11,
	$12::bigint * interval '1 microsecond', $13::bigint * interval '1 microsecond', $14, $15,
	$16::bigint * interval '1 microsecond',
	CASE WHEN $17::bigint > 0 THEN $17::bigint * interval '1 microsecond' END,
	CASE WHEN $18::bigint > 0 THEN now() + $18::bigint * interval '1 microsecond' END,
	$19, $20, $21)
ON CONFLICT (namespace, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING ` + execColumns

// Create inserts a new execution, pending (claimable at now + Delay) or,
// for a flow member that waits on its group, blocked. With an idempotency
// key already used in the namespace it returns the existing execution and
// existed = true, writing nothing.
func Create(ctx context.Context, db store.DB, lim Limits, p CreateParams) (x *Execution, existed bool, err error) {
	if err := p.Normalize(lim); err != nil {
		return nil, false, err
	}
	args := insertArgs(&p)
	err = store.WithRetry(ctx, db, func() error {
		x, err = scanExecution(db.QueryRow(ctx, insertSQL, args...))
		return err
	})
	if err == nil {
		return x, false, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, false, wrap("create execution in lane "+p.Lane, err)
	}
	// The key is taken: return its holder.
	x, err = scanExecution(db.QueryRow(ctx, `SELECT `+execColumns+` FROM ff_execution e
		WHERE e.namespace = $1 AND e.idempotency_key = $2`, p.Namespace, p.IdempotencyKey))
	if err != nil {
		return nil, false, wrap("read execution by idempotency key "+p.IdempotencyKey, err)
	}
	return x, true, nil
}

// insertManySQL inserts a batch in one statement from one array per
// column. A row's capabilities travel as a JSON array (Postgres arrays
// cannot be ragged).
const insertManySQL = `
INSERT INTO ff_execution AS e (partition_key, execution_id, flow_id, namespace, lane, kind, priority,
	required_capabilities, state, run_at, max_attempts, backoff_base, backoff_max, backoff_multiplier,
	backoff_jitter, lease_ttl, attempt_timeout, deadline_at, payload, tags)
SELECT i.partition_key, i.execution_id, i.flow_id, i.namespace, i.lane, i.kind, i.priority,
	ARRAY(SELECT jsonb_array_elements_text(i.caps)), i.state,
	now() + i.delay * interval '1 microsecond', i.max_attempts,
	i.base * interval '1 microsecond', i.max_backoff * interval '1 microsecond', i.multiplier, i.jitter,
	i.ttl * interval '1 microsecond',
	CASE WHEN i.timeout > 0 THEN i.timeout * interval '1 microsecond' END,
	CASE WHEN i.deadline > 0 THEN now() + i.deadline * interval '1 microsecond' END,
	i.payload, i.tags
FROM unnest($1::smallint[], $2::uuid[], $3::uuid[], $4::text[], $5::text[], $6::text[], $7::int[],
	$8::jsonb[], $9::text[], $10::bigint[], $11::int[], $12::bigint[], $13::bigint[], $14::float8[],
	$15::float8[], $16::bigint[], $17::bigint[], $18::bigint[], $19::bytea[], $20::jsonb[])
	AS i(partition_key, execution_id, flow_id, namespace, lane, kind, priority, caps, state, delay,
		max_attempts, base, max_backoff, multiplier, jitter, ttl, timeout, deadline, payload, tags)
RETURNING ` + execColumns

// CreateMany inserts executions in one statement and returns them in the
// order of ps. Idempotency keys are refused: a batch that half exists is
// not a thing a caller can reason about.
func CreateMany(ctx context.Context, db store.DB, lim Limits, ps []CreateParams) ([]*Execution, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	n := len(ps)
	var (
		parts                     = make([]int16, n)
		ids, flowIDs              = make([]uuid.UUID, n), make([]*uuid.UUID, n)
		namespaces, lanes, kinds  = make([]string, n), make([]string, n), make([]string, n)
		states                    = make([]string, n)
		priorities, maxAttempts   = make([]int32, n), make([]int32, n)
		caps, tags                = make([][]byte, n), make([]*map[string]any, n)
		delays, bases, maxes      = make([]int64, n), make([]int64, n), make([]int64, n)
		ttls, timeouts, deadlines = make([]int64, n), make([]int64, n), make([]int64, n)
		multipliers, jitters      = make([]float64, n), make([]float64, n)
		payloads                  = make([][]byte, n)
		order                     = make(map[uuid.UUID]int, n)
	)
	for i := range ps {
		p := &ps[i]
		if err := p.Normalize(lim); err != nil {
			return nil, fmt.Errorf("execution %d of %d: %w", i, n, err)
		}
		if p.IdempotencyKey != "" {
			return nil, fault.Invalid(fault.KindInvalidValue, "idempotency_key", p.IdempotencyKey, "not supported in a batch create")
		}
		r := newRow(p)
		parts[i], ids[i], flowIDs[i] = r.id.Partition, r.id.UUID, p.FlowID
		order[r.id.UUID] = i
		namespaces[i], lanes[i], kinds[i], states[i] = p.Namespace, p.Lane, p.Kind, string(r.state)
		priorities[i], maxAttempts[i] = int32(p.Priority), int32(p.MaxAttempts)
		var err error
		if caps[i], err = json.Marshal(r.caps); err != nil {
			return nil, fmt.Errorf("encode capabilities: %w", err)
		}
		if p.Tags != nil {
			tags[i] = &p.Tags
		}
		delays[i], bases[i], maxes[i] = r.delay, r.base, r.maxBackoff
		multipliers[i], jitters[i] = p.Retry.Multiplier, p.Retry.Jitter
		ttls[i], timeouts[i], deadlines[i] = r.ttl, r.attemptTimeout, r.deadline
		payloads[i] = r.payload
	}
	out := make([]*Execution, n)
	err := store.WithRetry(ctx, db, func() error {
		rows, err := db.Query(ctx, insertManySQL, parts, ids, flowIDs, namespaces, lanes, kinds, priorities,
			caps, states, delays, maxAttempts, bases, maxes, multipliers, jitters, ttls, timeouts, deadlines, payloads, tags)
		if err != nil {
			return err
		}
		defer rows.Close()
		got := 0
		for rows.Next() {
			x, err := scanExecution(rows)
			if err != nil {
				return err
			}
			i, ok := order[x.ID.UUID]
			if !ok {
				return fmt.Errorf("inserted an execution %s that was not asked for", x.ID)
			}
			out[i] = x
			got++
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if got != n {
			return fmt.Errorf("inserted %d of %d executions", got, n)
		}
		return nil
	})
	if err != nil {
		return nil, wrap(fmt.Sprintf("create %d executions", n), err)
	}
	return out, nil
}

// row is one execution to insert, from normalized params: a fresh id on
// the right partition and every column's value as both insert statements
// take it.
type row struct {
	id                            ident.ExecutionID
	state                         store.State
	caps                          []string
	payload                       []byte
	delay, base, maxBackoff       int64 // microseconds
	ttl, attemptTimeout, deadline int64 // microseconds
}

func newRow(p *CreateParams) row {
	r := row{id: ident.NewExecutionID(), state: store.StatePending, caps: p.RequiredCapabilities, payload: p.Payload,
		delay: micros(p.Delay), base: micros(p.Retry.Base), maxBackoff: micros(p.Retry.Max),
		ttl: micros(p.LeaseTTL), attemptTimeout: micros(p.AttemptTimeout), deadline: micros(p.Deadline)}
	if p.Partition != nil {
		r.id = ident.NewExecutionIDIn(*p.Partition)
	}
	if p.Blocked {
		r.state = store.StateBlocked
	}
	if r.caps == nil {
		r.caps = []string{}
	}
	if r.payload == nil {
		r.payload = []byte{}
	}
	return r
}

// insertArgs are insertSQL's arguments for normalized params.
func insertArgs(p *CreateParams) []any {
	r := newRow(p)
	return []any{r.id.Partition, r.id.UUID, p.FlowID, p.Namespace, p.Lane, p.Kind, p.Priority,
		r.caps, string(r.state), r.delay, p.MaxAttempts, r.base, r.maxBackoff, p.Retry.Multiplier, p.Retry.Jitter,
		r.ttl, r.attemptTimeout, r.deadline, r.payload, nullIfEmpty(p.IdempotencyKey), p.Tags}
}

// validateTagValue walks the JSON-like values of tags for text Postgres
// or encoding/json would refuse or alter.
func validateTagValue(v any) error {
	switch t := v.(type) {
	case string:
		return ValidateText("tags", t, 0)
	case map[string]any:
		for k, e := range t {
			if err := ValidateText("tags", k, 0); err != nil {
				return err
			}
			if err := validateTagValue(e); err != nil {
				return err
			}
		}
	case []any:
		for _, e := range t {
			if err := validateTagValue(e); err != nil {
				return err
			}
		}
	case []string:
		for _, e := range t {
			if err := ValidateText("tags", e, 0); err != nil {
				return err
			}
		}
	}
	return nil
}
