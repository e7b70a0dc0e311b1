package leases

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/flowfabric/ffd/ffdtype"
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

// The ranges of a create's integer fields, which the SQL API renders too
// (docs/sql.md).
var (
	PriorityRange    = fault.Range{Field: "priority", Min: math.MinInt32, Max: math.MaxInt32, Detail: "want a 32-bit integer"}
	MaxAttemptsRange = fault.Range{Field: "max_attempts", Min: 1, Max: MaxMaxAttempts, Detail: fmt.Sprintf("want 1..%d", MaxMaxAttempts)}
	LeaseTTLRange    = fault.Range{Field: "lease_ttl", Min: int64(MinLeaseTTL), Max: int64(MaxLeaseTTL), Scale: 1000,
		Detail: fmt.Sprintf("want %s..%s", MinLeaseTTL, MaxLeaseTTL)}
	AttemptTimeoutRange = fault.Range{Field: "attempt_timeout", Min: int64(time.Millisecond), Max: int64(MaxAttemptTimeout), None: true,
		Scale: 1000, Detail: fmt.Sprintf("want 0 (none) or 1ms..%s", MaxAttemptTimeout)}
	DeadlineRange = fault.Range{Field: "deadline", Min: int64(time.Millisecond), Max: int64(MaxDeadline), None: true, Scale: 1000,
		Detail: fmt.Sprintf("want 0 (none) or 1ms..%s", MaxDeadline)}
	DelayRange = fault.Range{Field: "delay", Min: 0, Max: int64(MaxDelay), Scale: 1000, Detail: fmt.Sprintf("want 0..%s", MaxDelay)}
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
	MaxCapabilityLength = 128
)

// NamePattern is the form of a lane's or a namespace's name, as a regular
// expression: what the SQL API renders (docs/sql.md), and what validName's
// byte loop is held to (FuzzValidName).
const NamePattern = `^[A-Za-z0-9_.:-]{1,128}$`

// NameDetail is the detail of a name's refusal.
const NameDetail = "want 1 to 128 characters of A-Z a-z 0-9 _ . : -"

// validName reports whether v is 1 to MaxNameLength characters of
// A-Z a-z 0-9 _ . : - (NamePattern; the database checks the same form).
// A byte loop: the regular expression it replaces was a tenth of
// CreateMany's client time, run on every row.
func validName(v string) bool {
	if len(v) == 0 || len(v) > MaxNameLength {
		return false
	}
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '.', c == ':', c == '-':
		default:
			return false
		}
	}
	return true
}

// Placement is what only the machinery sets on a new execution: a flow
// member is minted on its flow's partition, and starts blocked when it
// waits on an edge group; a solo execution with Partition set (a rerun)
// is minted there too.
type Placement struct {
	FlowID    *uuid.UUID
	Partition *int16
	Blocked   bool
	// Subflow places a sub-flow step, the only execution of
	// store.SubflowLane.
	Subflow bool
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

// CheckPayload refuses a payload of n bytes above the limit.
func (l Limits) CheckPayload(n int) error {
	if n > l.maxPayload() {
		return fault.Invalid(ffdtype.KindTooLarge, "payload", strconv.Itoa(n)+" bytes", fmt.Sprintf("at most %d bytes", l.maxPayload()))
	}
	return nil
}

// AtLeast is l raised, where needed, to accept payloads of n bytes: for
// what re-creates stored work (a rerun, a schedule's tick), whose payload
// was accepted once, by a client whose limit may have been larger than
// that of the process re-creating it (the daemon, the console).
func (l Limits) AtLeast(n int) Limits {
	if n > l.maxPayload() {
		l.MaxPayloadBytes = n
	}
	return l
}

// NormalizeNamespace is ns, or DefaultNamespace when ns is empty, checked:
// the one place the namespace default is applied, for executions, flows,
// schedules and a client's own.
func NormalizeNamespace(ns *string) error {
	if *ns == "" {
		*ns = DefaultNamespace
	}
	return ValidateName("namespace", *ns)
}

// ValidateName checks a lane or namespace.
func ValidateName(field, v string) error {
	if !validName(v) {
		return fault.Invalid(ffdtype.KindInvalidValue, field, v, NameDetail)
	}
	return nil
}

// Normalized is CreateParams with its defaults filled and every field
// checked: what Normalize returns, and the only thing the insert path
// (Insert, InsertMany) takes. So each execution is checked exactly once
// however it comes in (a client, a flow submission, a schedule's tick, a
// rerun), and nothing unchecked reaches an insert.
type Normalized struct {
	p     ffdtype.CreateParams
	place Placement
}

// Normalize fills p's defaults and checks it, placed as place says; it
// touches no database, so bad input writes nothing. A JSON value becomes
// the payload (EncodePayload).
func Normalize(p ffdtype.CreateParams, place Placement, lim Limits) (Normalized, error) {
	if err := normalize(&p, place, lim); err != nil {
		return Normalized{}, err
	}
	return Normalized{p: p, place: place}, nil
}

// NormalizeAll normalizes a batch of solo executions, naming the first bad
// one.
func NormalizeAll(lim Limits, ps []ffdtype.CreateParams) ([]Normalized, error) {
	ns := make([]Normalized, len(ps))
	for i, p := range ps {
		n, err := Normalize(p, Placement{}, lim)
		if err != nil {
			return nil, fmt.Errorf("execution %d of %d: %w", i, len(ps), err)
		}
		ns[i] = n
	}
	return ns, nil
}

// EncodePayload turns p.JSON, when set, into p.Payload (the two are
// exclusive), so that what is stored, and what a schedule keeps, is bytes.
func EncodePayload(p *ffdtype.CreateParams) error {
	if p.JSON == nil {
		return nil
	}
	if len(p.Payload) > 0 {
		return fault.Invalid(ffdtype.KindInvalidValue, "payload", fmt.Sprintf("%d bytes", len(p.Payload)), "set Payload or JSON, not both")
	}
	b, err := json.Marshal(p.JSON)
	if err != nil {
		return fault.Invalid(ffdtype.KindInvalidValue, "payload", fmt.Sprintf("%T", p.JSON), "JSON encoding failed: "+err.Error())
	}
	p.Payload, p.JSON = b, nil
	return nil
}

func normalize(p *ffdtype.CreateParams, place Placement, lim Limits) error {
	if err := EncodePayload(p); err != nil {
		return err
	}
	if err := NormalizeNamespace(&p.Namespace); err != nil {
		return err
	}
	if p.Lane == "" {
		return fault.Invalid(ffdtype.KindRequired, "lane", "", "a lane is required")
	}
	if err := ValidateName("lane", p.Lane); err != nil {
		return err
	}
	if p.Lane == store.SubflowLane && !place.Subflow {
		return fault.Invalid(ffdtype.KindInvalidValue, "lane", p.Lane, "the lane of sub-flow steps, which the daemon starts; give a SubmitNode a Flow to make one")
	}
	if err := ValidateVersion("version", p.Version); err != nil {
		return err
	}
	if err := ValidateText("kind", p.Kind, MaxKindLength); err != nil {
		return err
	}
	if err := lim.CheckPayload(len(p.Payload)); err != nil {
		return err
	}
	if !PriorityRange.Holds(int64(p.Priority)) {
		return PriorityRange.Refusal(strconv.Itoa(p.Priority))
	}
	if err := validateCapabilities("required_capabilities", p.RequiredCapabilities); err != nil {
		return err
	}
	if err := versionCapability(p); err != nil {
		return err
	}
	if p.MaxAttempts == 0 {
		p.MaxAttempts = DefaultMaxAttempts
	}
	if !MaxAttemptsRange.Holds(int64(p.MaxAttempts)) {
		return MaxAttemptsRange.Refusal(strconv.Itoa(p.MaxAttempts))
	}
	if err := normalizeRetry(&p.Retry); err != nil {
		return err
	}
	if p.LeaseTTL == 0 {
		p.LeaseTTL = DefaultLeaseTTL
	}
	if err := checkDurations(p); err != nil {
		return err
	}
	if err := ValidateText("idempotency_key", p.IdempotencyKey, MaxIdempotencyKey); err != nil {
		return err
	}
	if err := validateUnique(p, place); err != nil {
		return err
	}
	if err := validateConcurrency(p); err != nil {
		return err
	}
	if err := validateDebounce(p, place); err != nil {
		return err
	}
	if p.Step != "" {
		if err := ValidateText("step", p.Step, MaxNameLength); err != nil {
			return err
		}
		if place.FlowID == nil {
			return fault.Invalid(ffdtype.KindInvalidValue, "step", p.Step, "a step name is for a flow member: create it with CreateInFlow or SubmitFlow")
		}
	}
	return normalizeTags(p)
}

// checkDurations checks p's durations against their ranges.
func checkDurations(p *ffdtype.CreateParams) error {
	switch {
	case !LeaseTTLRange.Holds(int64(p.LeaseTTL)):
		return LeaseTTLRange.Refusal(p.LeaseTTL.String())
	case !AttemptTimeoutRange.Holds(int64(p.AttemptTimeout)):
		return AttemptTimeoutRange.Refusal(p.AttemptTimeout.String())
	case !DeadlineRange.Holds(int64(p.Deadline)):
		return DeadlineRange.Refusal(p.Deadline.String())
	case !DelayRange.Holds(int64(p.Delay)):
		return DelayRange.Refusal(p.Delay.String())
	}
	return nil
}

// versionCapability adds the capability of p's version to its required
// capabilities (once); a version capability given outright is refused:
// a version is named in Version, and must be announced.
func versionCapability(p *ffdtype.CreateParams) error {
	want := ffdtype.VersionCapability(p.Version)
	for _, c := range p.RequiredCapabilities {
		if strings.HasPrefix(c, ffdtype.VersionCapabilityPrefix) && (p.Version == "" || c != want) {
			return fault.Invalid(ffdtype.KindInvalidValue, "required_capabilities", c, "a version's capability; name the version in Version")
		}
	}
	if p.Version != "" && !slices.Contains(p.RequiredCapabilities, want) {
		if len(p.RequiredCapabilities) >= MaxCapabilities {
			return fault.Invalid(ffdtype.KindTooLarge, "required_capabilities", strconv.Itoa(len(p.RequiredCapabilities))+" capabilities", fmt.Sprintf("at most %d with the version's", MaxCapabilities))
		}
		p.RequiredCapabilities = append(slices.Clip(p.RequiredCapabilities), want)
	}
	return nil
}

// MaxVersionLength bounds a version's name.
const MaxVersionLength = 64

// ValidateVersion checks a version's name: "" (none), or 1-64 of
// [A-Za-z0-9_.:+-] (the schema's check on ff_version).
func ValidateVersion(field, v string) error {
	if v == "" {
		return nil
	}
	ok := len(v) <= MaxVersionLength
	for _, r := range v {
		ok = ok && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_.:+-", r))
	}
	if !ok {
		return fault.Invalid(ffdtype.KindInvalidValue, field, v, "want 1-64 of [A-Za-z0-9_.:+-]")
	}
	return nil
}

// MaxUniqueWindow bounds CreateParams.UniqueWindow.
const MaxUniqueWindow = 366 * 24 * time.Hour

// validateUnique checks the unique key and its window.
func validateUnique(p *ffdtype.CreateParams, place Placement) error {
	if p.UniqueKey == "" {
		if p.UniqueWindow != 0 {
			return fault.Invalid(ffdtype.KindInvalidValue, "unique_window", p.UniqueWindow.String(), "a window needs a unique key")
		}
		return nil
	}
	if p.IdempotencyKey != "" {
		return fault.Invalid(ffdtype.KindInvalidValue, "unique_key", p.UniqueKey, "give an idempotency key or a unique key, not both")
	}
	if place.FlowID != nil {
		// A member lives on its flow's partition, and a unique key's
		// holders must all live on the key's.
		return fault.Invalid(ffdtype.KindInvalidValue, "unique_key", p.UniqueKey, "a unique key is for a solo execution, not a flow member")
	}
	if err := ValidateText("unique_key", p.UniqueKey, MaxIdempotencyKey); err != nil {
		return err
	}
	if p.UniqueWindow != 0 && (p.UniqueWindow < time.Second || p.UniqueWindow > MaxUniqueWindow) {
		return fault.Invalid(ffdtype.KindOutOfRange, "unique_window", p.UniqueWindow.String(), "want 0 (while live) or 1s.."+MaxUniqueWindow.String())
	}
	return nil
}

// uniqueKey is the key as stored: with its window's start when windowed.
func uniqueKey(p *ffdtype.CreateParams, now time.Time) (key string, whileLive bool) {
	if p.UniqueKey == "" || p.UniqueWindow == 0 {
		return p.UniqueKey, true
	}
	ns := now.UnixNano()
	start := time.Unix(0, ns-ns%int64(p.UniqueWindow)).UTC().Format(time.RFC3339)
	return p.UniqueKey + "@" + start, false
}

// normalizeTags checks the tags encode as a JSON object of bounded size,
// exactly as given; nil becomes the empty object.
func normalizeTags(p *ffdtype.CreateParams) error {
	if p.Tags == nil {
		p.Tags = map[string]any{}
		return nil
	}
	b, err := json.Marshal(p.Tags)
	if err != nil {
		return fault.Invalid(ffdtype.KindInvalidValue, "tags", fmt.Sprint(p.Tags), "must encode as a JSON object: "+err.Error())
	}
	if len(b) > MaxTagsBytes {
		return fault.Invalid(ffdtype.KindTooLarge, "tags", strconv.Itoa(len(b))+" bytes", fmt.Sprintf("at most %d bytes of JSON", MaxTagsBytes))
	}
	if err := validateJSONText("tags", b); err != nil {
		return err
	}
	// encoding/json silently replaces invalid UTF-8; refuse it instead of
	// storing something other than what was given.
	return validateTagValue(p.Tags)
}

func validateCapabilities(field string, caps []string) error {
	if len(caps) > MaxCapabilities {
		return fault.Invalid(ffdtype.KindTooLarge, field, strconv.Itoa(len(caps))+" capabilities", fmt.Sprintf("at most %d", MaxCapabilities))
	}
	for _, c := range caps {
		if c == "" || len(c) > MaxCapabilityLength {
			return fault.Invalid(ffdtype.KindInvalidValue, field, c, fmt.Sprintf("each capability is 1 to %d bytes", MaxCapabilityLength))
		}
		if err := ValidateText(field, c, 0); err != nil {
			return err
		}
	}
	return nil
}

func normalizeRetry(r *ffdtype.RetryPolicy) error {
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
		return fault.Invalid(ffdtype.KindOutOfRange, "retry.base", r.Base.String(), fmt.Sprintf("want 1ms..%s", MaxBackoff))
	case r.Max < r.Base || r.Max > MaxBackoff:
		return fault.Invalid(ffdtype.KindOutOfRange, "retry.max", r.Max.String(), fmt.Sprintf("want retry.base..%s", MaxBackoff))
	// Written as negated ranges so that NaN, which fails every
	// comparison, is refused too.
	case !(r.Multiplier >= 1 && r.Multiplier <= MaxBackoffFactor):
		return fault.Invalid(ffdtype.KindOutOfRange, "retry.multiplier", strconv.FormatFloat(r.Multiplier, 'g', -1, 64), "want 1..100")
	case !(r.Jitter >= 0 && r.Jitter <= 1):
		return fault.Invalid(ffdtype.KindOutOfRange, "retry.jitter", strconv.FormatFloat(r.Jitter, 'g', -1, 64), "want 0..1")
	}
	return nil
}

// Create inserts a new execution, pending (claimable at now + Delay) or,
// for a flow member that waits on its group, blocked. With an idempotency
// key already used in the namespace it returns the existing execution and
// existed = true, writing nothing.
func Create(ctx context.Context, db store.DB, lim Limits, p ffdtype.CreateParams) (x *ffdtype.Execution, existed bool, err error) {
	n, err := Normalize(p, Placement{}, lim)
	if err != nil {
		return nil, false, err
	}
	return Insert(ctx, db, n)
}

// Insert is Create of params already normalized.
func Insert(ctx context.Context, db store.DB, n Normalized) (x *ffdtype.Execution, existed bool, err error) {
	x, existed, _, err = InsertFolding(ctx, db, n)
	return x, existed, err
}

// InsertFolding is Insert that says, for a debounced create, how many
// creates the execution now stands for (1: this one created it; 0 for a
// create without a debounce). A create folded into an earlier one's
// execution reports existed.
func InsertFolding(ctx context.Context, db store.DB, n Normalized) (x *ffdtype.Execution, existed bool, folds int64, err error) {
	if err := knownVersions(ctx, db, n); err != nil {
		return nil, false, 0, err
	}
	r := newRow(&n)
	if r.Debounce == nil {
		x, existed, err = store.InsertExecution(ctx, db, r)
		return x, existed, 0, strictLimit(err, strconv.Itoa(r.ConcurrencyLimit))
	}
	x, folds, err = store.InsertDebounced(ctx, db, r)
	return x, folds > 1, folds, strictLimit(err, strconv.Itoa(r.ConcurrencyLimit))
}

// KnownVersion refuses a flow's version that no worker announced in its
// namespace (*ValidationError, kind unknown_version); "" reads nothing.
func KnownVersion(ctx context.Context, db store.DB, namespace, version string) error {
	if version == "" {
		return nil
	}
	return knownRefs(ctx, db, []store.VersionRef{{Namespace: namespace, Version: version}})
}

// knownVersions refuses executions whose version no worker announced in
// their namespace (*ValidationError, kind unknown_version); it reads
// nothing for unversioned ones.
func knownVersions(ctx context.Context, db store.DB, ns ...Normalized) error {
	var want []store.VersionRef
	for i := range ns {
		if v := ns[i].p.Version; v != "" && !slices.Contains(want, store.VersionRef{Namespace: ns[i].p.Namespace, Version: v}) {
			want = append(want, store.VersionRef{Namespace: ns[i].p.Namespace, Version: v})
		}
	}
	if len(want) == 0 {
		return nil
	}
	return knownRefs(ctx, db, want)
}

func knownRefs(ctx context.Context, db store.DB, want []store.VersionRef) error {
	missing, err := store.UnknownVersions(ctx, db, want)
	if err != nil || len(missing) == 0 {
		return err
	}
	return fault.Invalid(ffdtype.KindUnknownVersion, "version", missing[0].Version,
		"no worker announced this version in namespace "+missing[0].Namespace+": start a worker that serves it (WorkerConfig.Versions), or announce it (ffd version add)")
}

// strictLimit is a *ValidationError for a create that gave a key of
// strict order a running limit (limit, as given) above 1, which writes
// nothing; else err.
func strictLimit(err error, limit string) error {
	if errors.Is(err, store.ErrStrictLimit) {
		return fault.Invalid(ffdtype.KindInvalidValue, "concurrency_limit", limit, store.ErrStrictLimit.Error())
	}
	return err
}

// CreateMany inserts executions in one statement and returns them in the
// order of ps. Idempotency keys are refused: a batch that half exists is
// not a thing a caller can reason about.
func CreateMany(ctx context.Context, db store.DB, lim Limits, ps []ffdtype.CreateParams) ([]*ffdtype.Execution, error) {
	ns, err := NormalizeAll(lim, ps)
	if err != nil {
		return nil, err
	}
	return InsertMany(ctx, db, ns)
}

// InsertMany is CreateMany of params already normalized.
func InsertMany(ctx context.Context, db store.DB, ns []Normalized) ([]*ffdtype.Execution, error) {
	if len(ns) == 0 {
		return nil, nil
	}
	if err := knownVersions(ctx, db, ns...); err != nil {
		return nil, err
	}
	rows := make([]store.NewExecution, len(ns))
	for i := range ns {
		p := &ns[i].p
		if p.IdempotencyKey != "" {
			return nil, fault.Invalid(ffdtype.KindInvalidValue, "idempotency_key", p.IdempotencyKey, "not supported in a batch create")
		}
		if p.UniqueKey != "" {
			return nil, fault.Invalid(ffdtype.KindInvalidValue, "unique_key", p.UniqueKey, "not supported in a batch create")
		}
		if p.Debounce != nil {
			return nil, fault.Invalid(ffdtype.KindInvalidValue, "debounce.key", p.Debounce.Key, "not supported in a batch create")
		}
		rows[i] = newRow(&ns[i])
	}
	xs, err := store.InsertExecutions(ctx, db, rows)
	return xs, strictLimit(err, "above 1")
}

// newRow is the row to insert for normalized params: a fresh id on the
// right partition and every column's value.
func newRow(n *Normalized) store.NewExecution {
	p, place := &n.p, n.place
	r := store.NewExecution{ID: ident.NewExecutionID(), FlowID: place.FlowID, Namespace: p.Namespace, Lane: p.Lane,
		Kind: p.Kind, Priority: p.Priority, RequiredCapabilities: p.RequiredCapabilities, State: ffdtype.StatePending,
		Delay: p.Delay, MaxAttempts: p.MaxAttempts, Retry: p.Retry, LeaseTTL: p.LeaseTTL,
		AttemptTimeout: p.AttemptTimeout, Deadline: p.Deadline, Payload: p.Payload,
		IdempotencyKey: p.IdempotencyKey, Tags: p.Tags, Step: p.Step,
		ConcurrencyKey: p.ConcurrencyKey, ConcurrencyLimit: p.ConcurrencyLimit}
	r.UniqueKey, r.UniqueWhileLive = uniqueKey(p, time.Now())
	if d := p.Debounce; d != nil {
		r.Debounce = d
		if d.Mode != ffdtype.DebounceLeading {
			r.Delay = d.Window
		}
	}
	// Placement: a flow member on its flow's partition; a solo execution
	// with a key on the key's, where the key's unique index looks; a rerun
	// on its original's (Partition set without a flow); a solo execution
	// with a concurrency key on that key's, so that on a distributed
	// Postgres a key's executions share a shard, and a keyed claim and
	// its completions can keep to few (docs/flow-control.md).
	switch {
	case place.FlowID != nil && place.Partition != nil:
		r.ID = ident.NewExecutionIDIn(*place.Partition)
	case r.IdempotencyKey != "":
		r.ID = ident.NewExecutionIDForKey(r.Namespace, r.IdempotencyKey)
	case r.UniqueKey != "":
		r.ID = ident.NewExecutionIDForKey(r.Namespace, r.UniqueKey)
	case p.Debounce != nil:
		r.ID = ident.NewExecutionIDForKey(r.Namespace, p.Debounce.Key)
	case place.Partition != nil:
		r.ID = ident.NewSoloExecutionIDIn(*place.Partition)
	case p.ConcurrencyKey != "":
		r.ID = ident.NewSoloExecutionIDIn(ident.ConcurrencyKeyPartition(p.Lane, p.ConcurrencyKey))
	}
	if place.Blocked {
		r.State = ffdtype.StateBlocked
	}
	if r.RequiredCapabilities == nil {
		r.RequiredCapabilities = []string{}
	}
	if r.Payload == nil {
		r.Payload = []byte{}
	}
	return r
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
