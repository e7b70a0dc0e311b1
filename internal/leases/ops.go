package leases

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/fault"
	"github.com/flowfabric/ffd/internal/store"
)

// Renew extends a running lease by its TTL, fenced on epoch.
func Renew(ctx context.Context, db store.DB, id ffdtype.ExecutionID, epoch int64) (time.Time, error) {
	if err := validateFence(id, epoch); err != nil {
		return time.Time{}, err
	}
	expires, held, err := store.Renew(ctx, db, id, epoch)
	if err != nil {
		return time.Time{}, err
	}
	if !held {
		return time.Time{}, explainLost(ctx, db, id, epoch)
	}
	return expires, nil
}

// Complete ends a running execution as completed with result, fenced on
// epoch. Repeating a completion that succeeded returns its stored outcome
// and writes nothing. result is bounded like a payload (lim).
func Complete(ctx context.Context, db store.DB, lim Limits, id ffdtype.ExecutionID, epoch int64, result []byte) (*ffdtype.Ending, error) {
	if err := validateCompletion(lim, id, epoch, result); err != nil {
		return nil, err
	}
	if result == nil {
		result = []byte{}
	}
	ended, err := store.Terminate(ctx, db, []store.Termination{{ID: id, Epoch: epoch, State: ffdtype.StateCompleted, Result: result}})
	if err != nil {
		return nil, err
	}
	if len(ended) == 1 {
		return &ffdtype.Ending{State: ffdtype.StateCompleted, Attempt: ended[0].Attempt, Result: result, EventID: ended[0].EventID}, nil
	}
	return repeatedOr(ctx, db, id, epoch, ffdtype.AttemptSucceeded)
}

// Fail ends a running attempt as failed, fenced on epoch: back to pending
// after backoff when retryable with attempts left, else terminal failed.
// Repeating a failure that took effect returns its stored outcome.
func Fail(ctx context.Context, db store.DB, id ffdtype.ExecutionID, epoch int64, p ffdtype.FailParams) (*ffdtype.Ending, error) {
	if err := validateFence(id, epoch); err != nil {
		return nil, err
	}
	if err := ValidateText("error", p.Error, MaxErrorBytes); err != nil {
		return nil, err
	}
	msg := p.Error
	if msg == "" {
		msg = "failed"
	}
	if p.Retryable {
		kind := store.RequeueFailed
		if p.Immediate {
			kind = store.RequeueFailedNow
		}
		rq, err := store.Requeue(ctx, db, kind, false, []store.RequeueItem{{ID: id, Epoch: epoch, Error: msg}})
		if err != nil {
			return nil, err
		}
		if len(rq) == 1 {
			return &ffdtype.Ending{State: ffdtype.StatePending, Attempt: rq[0].Attempt, RunAt: rq[0].RunAt}, nil
		}
	}
	ended, err := store.Terminate(ctx, db, []store.Termination{{ID: id, Epoch: epoch, State: ffdtype.StateFailed, Error: msg}})
	if err != nil {
		return nil, err
	}
	if len(ended) == 1 {
		return &ffdtype.Ending{State: ffdtype.StateFailed, Attempt: ended[0].Attempt, EventID: ended[0].EventID}, nil
	}
	return repeatedOr(ctx, db, id, epoch, ffdtype.AttemptFailed)
}

// repeatedOr explains a fenced update that matched nothing: the same call
// already took effect (the attempt run under epoch ended with want), or
// the lease is lost, or the execution does not exist.
func repeatedOr(ctx context.Context, db store.DB, id ffdtype.ExecutionID, epoch int64, want ffdtype.AttemptOutcome) (*ffdtype.Ending, error) {
	r, err := store.ReadEpochAttempt(ctx, db, id, epoch)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, &ffdtype.NotFoundError{Object: "execution", ID: id.String()}
	}
	if err != nil {
		return nil, wrap("read execution "+id.String(), err)
	}
	if r.Outcome != nil && *r.Outcome == want {
		o := &ffdtype.Ending{Repeated: true, Attempt: *r.OfEpoch}
		switch {
		case want == ffdtype.AttemptSucceeded:
			o.State, o.Result = ffdtype.StateCompleted, r.Result
		case r.State == ffdtype.StateFailed && r.Attempt == *r.OfEpoch:
			o.State = ffdtype.StateFailed
		default:
			// That failure was retried; the execution has moved on since.
			o.State, o.RunAt = ffdtype.StatePending, r.RunAt
		}
		return o, nil
	}
	return nil, explainLost(ctx, db, id, epoch)
}

// explainLost builds the lease-lost (or not-found) error for a fenced
// operation that matched nothing. A read that fails leaves the lease lost
// (LeaseLostError.Unread): under a load that times reads out, a heartbeat
// given the read's error retried the renewal of a lost lease, and its
// read, dozens of times an execution (the fault suite on Citus).
func explainLost(ctx context.Context, db store.DB, id ffdtype.ExecutionID, epoch int64) error {
	f, err := store.ReadFence(ctx, db, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return &ffdtype.NotFoundError{Object: "execution", ID: id.String()}
	}
	if err != nil {
		return &ffdtype.LeaseLostError{ExecutionID: id.String(), Epoch: epoch, Unread: wrap("read execution "+id.String(), err)}
	}
	return &ffdtype.LeaseLostError{ExecutionID: id.String(), Epoch: epoch, CurrentEpoch: f.Epoch, State: string(f.State)}
}

// Default cancellation attribution.
const (
	DefaultCancelReason = "cancelled"
	DefaultCancelledBy  = "client"
)

// Cancel ends a non-terminal execution as cancelled; a running lease is
// fenced. Cancelling a cancelled execution is a no-op success (Repeated);
// any other terminal state is an *ffdtype.AlreadyTerminalError.
func Cancel(ctx context.Context, db store.DB, id ffdtype.ExecutionID, reason, by string) (*ffdtype.Ending, error) {
	if err := ValidateID("execution_id", id); err != nil {
		return nil, err
	}
	if err := ValidateText("reason", reason, MaxReasonBytes); err != nil {
		return nil, err
	}
	if err := ValidateText("by", by, MaxByBytes); err != nil {
		return nil, err
	}
	if reason == "" {
		reason = DefaultCancelReason
	}
	if by == "" {
		by = DefaultCancelledBy
	}
	ended, err := store.Terminate(ctx, db, []store.Termination{{ID: id, State: ffdtype.StateCancelled, Reason: reason, By: by}})
	if err != nil {
		return nil, err
	}
	if len(ended) == 1 {
		return &ffdtype.Ending{State: ffdtype.StateCancelled, Attempt: ended[0].Attempt, EventID: ended[0].EventID}, nil
	}
	x, err := Get(ctx, db, id)
	if err != nil {
		return nil, err
	}
	if x.State == ffdtype.StateCancelled {
		return &ffdtype.Ending{State: ffdtype.StateCancelled, Attempt: x.Attempt, Repeated: true}, nil
	}
	return nil, &ffdtype.AlreadyTerminalError{Object: "execution", ID: id.String(), State: string(x.State)}
}

// Revoke takes a running execution's lease away (operator action): back to
// pending at once, epoch bumped so the holder is fenced, attempt revoked.
func Revoke(ctx context.Context, db store.DB, id ffdtype.ExecutionID, reason string) (*ffdtype.Requeued, error) {
	if err := ValidateID("execution_id", id); err != nil {
		return nil, err
	}
	if err := ValidateText("reason", reason, MaxReasonBytes); err != nil {
		return nil, err
	}
	if reason == "" {
		reason = "revoked by operator"
	}
	for range store.MaxRetries {
		x, err := Get(ctx, db, id)
		if err != nil {
			return nil, err
		}
		if x.State.Terminal() {
			return nil, &ffdtype.AlreadyTerminalError{Object: "execution", ID: id.String(), State: string(x.State)}
		}
		if x.State != ffdtype.StateRunning {
			return nil, &ffdtype.ConflictError{Object: "execution", ID: id.String(), Reason: "only a running execution can be revoked; it is " + string(x.State), Existing: x}
		}
		rq, err := store.Requeue(ctx, db, store.RequeueRevoked, true, []store.RequeueItem{{ID: id, Epoch: x.LeaseEpoch, Error: reason}})
		if err != nil {
			return nil, err
		}
		if len(rq) == 1 {
			return &rq[0], nil
		}
		// The lease changed hands between the read and the update; look again.
	}
	return nil, &ffdtype.ConflictError{Object: "execution", ID: id.String(), Reason: "lease kept changing hands; revoke again"}
}

// GetByUUID reads the execution with this uuid, whatever its partition:
// what a person pasting an id means. Several matches are refused.
func GetByUUID(ctx context.Context, db store.DB, id uuid.UUID) (*ffdtype.Execution, error) {
	xs, err := store.ExecutionsByUUID(ctx, db, id)
	if err != nil {
		return nil, wrap("read execution "+id.String(), err)
	}
	switch len(xs) {
	case 0:
		return nil, &ffdtype.NotFoundError{Object: "execution", ID: id.String()}
	case 1:
		return xs[0], nil
	}
	return nil, fault.Invalid(ffdtype.KindInvalidValue, "execution_id", id.String(),
		"ambiguous: executions on several partitions have this uuid; give the full {fp:N}:<uuid> id")
}

// Get reads one execution.
func Get(ctx context.Context, db store.DB, id ffdtype.ExecutionID) (*ffdtype.Execution, error) {
	if err := ValidateID("execution_id", id); err != nil {
		return nil, err
	}
	x, err := store.GetExecution(ctx, db, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, &ffdtype.NotFoundError{Object: "execution", ID: id.String()}
	}
	if err != nil {
		return nil, wrap("read execution "+id.String(), err)
	}
	return x, nil
}

// Completion is one fenced completion of a batch.
type Completion struct {
	ID     ffdtype.ExecutionID
	Epoch  int64
	Result []byte
	// Solo says the caller knows the execution is in no flow (it claimed
	// it so), which spares the daemon a look for its completion event
	// (store.Termination.Solo). An execution added to a flow while it ran
	// is still dispatched: by the sweep, after its grace.
	Solo bool
}

// CompleteMany completes a batch of executions in one transaction (group
// commit), each fenced on its own epoch exactly as Complete. It returns one
// outcome or error per item, in order; a lost lease or invalid input fails
// only its item.
//
// lockTimeout, when positive, bounds how long the batch waits for any row
// lock; past it the whole batch fails with SQLSTATE 55P03 (IsLockTimeout)
// and nothing is written.
func CompleteMany(ctx context.Context, db store.DB, lim Limits, items []Completion, lockTimeout time.Duration) ([]*ffdtype.Ending, []error, error) {
	outs, errs := make([]*ffdtype.Ending, len(items)), make([]error, len(items))
	ends := make([]store.Termination, 0, len(items))
	for i, it := range items {
		if errs[i] = validateCompletion(lim, it.ID, it.Epoch, it.Result); errs[i] != nil {
			continue
		}
		r := it.Result
		if r == nil {
			r = []byte{}
		}
		ends = append(ends, store.Termination{ID: it.ID, Epoch: it.Epoch, State: ffdtype.StateCompleted, Result: r, Solo: it.Solo})
	}
	ended, err := store.TerminateWithin(ctx, db, ends, lockTimeout)
	if err != nil {
		return nil, nil, err
	}
	done := make(map[ffdtype.ExecutionID]store.Ended, len(ended))
	for _, e := range ended {
		done[e.ID] = e
	}
	for i, it := range items {
		if errs[i] != nil {
			continue
		}
		if e, ok := done[it.ID]; ok {
			outs[i] = &ffdtype.Ending{State: ffdtype.StateCompleted, Attempt: e.Attempt, Result: it.Result, EventID: e.EventID}
			if outs[i].Result == nil {
				outs[i].Result = []byte{}
			}
			continue
		}
		outs[i], errs[i] = repeatedOr(ctx, db, it.ID, it.Epoch, ffdtype.AttemptSucceeded)
	}
	return outs, errs, nil
}

// ValidateCompletion checks a completion's id, epoch and result size
// (bounded like a payload), as Complete does, for completions written
// elsewhere (a spawn).
func ValidateCompletion(lim Limits, id ffdtype.ExecutionID, epoch int64, result []byte) error {
	return validateCompletion(lim, id, epoch, result)
}

func validateCompletion(lim Limits, id ffdtype.ExecutionID, epoch int64, result []byte) error {
	if err := validateFence(id, epoch); err != nil {
		return err
	}
	if len(result) > lim.maxPayload() {
		return fault.Invalid(ffdtype.KindTooLarge, "result", strconv.Itoa(len(result))+" bytes",
			fmt.Sprintf("at most %d bytes (the client's MaxPayloadBytes)", lim.maxPayload()))
	}
	return nil
}

// ExplainLost is the error of a fenced operation that matched nothing,
// for the callers outside this package that fence (a spawn): the lease is
// lost, or the execution does not exist.
func ExplainLost(ctx context.Context, db store.DB, id ffdtype.ExecutionID, epoch int64) error {
	return explainLost(ctx, db, id, epoch)
}
