package ffd

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/internal/ident"
	"github.com/flowfabric/ffd/internal/leases"
)

// SuspendError is what a handler returns to end its attempt in a wait
// instead of completing or failing (Sleep, SleepUntil, WaitForSignal):
// the worker records the wait, frees the slot, and a later attempt runs
// the handler again when the wait ends; it reads how with Job.Wake. A
// wait that cannot be (a sleep out of range, a bad signal name) fails
// the execution for good, as a bug no retry would fix.
type SuspendError struct {
	Params SuspendParams
}

func (e *SuspendError) Error() string {
	switch {
	case e.Params.Signal != "" && e.Params.Timeout > 0:
		return fmt.Sprintf("wait for signal %s (timeout %s)", e.Params.Signal, e.Params.Timeout)
	case e.Params.Signal != "":
		return "wait for signal " + e.Params.Signal
	case e.Params.For != 0 || e.Params.Until.IsZero():
		return "sleep " + e.Params.For.String()
	}
	return "sleep until " + e.Params.Until.UTC().Format(time.RFC3339Nano)
}

// Sleep ends the handler's attempt in a durable sleep: return it as the
// handler's error. The execution is claimed again d from now (the
// database's clock), by any worker; the sleep holds no slot and no
// lease, survives restarts of every process, and does not count against
// max_attempts. d: 1ms..366 days.
func Sleep(d time.Duration) error { return &SuspendError{Params: SuspendParams{For: d}} }

// SleepUntil is Sleep until t; a t already past resumes at once.
func SleepUntil(t time.Time) error { return &SuspendError{Params: SuspendParams{Until: t}} }

// WaitForSignal ends the handler's attempt in a wait for a signal named
// name, sent to the execution or to its flow (Client.Signal), or until
// timeout passes (0: no timeout). A signal sent before the wait began
// ends it at once. The next attempt reads what ended it, and the
// signal's payload, with Job.Wake.
func WaitForSignal(name string, timeout time.Duration) error {
	return &SuspendError{Params: SuspendParams{Signal: name, Timeout: timeout}}
}

// Suspend ends the running attempt held at epoch in the wait p
// describes, fenced on epoch (ErrLeaseLost when the lease is no longer
// held): the execution goes back to pending, holding no lease, until
// the wait ends. For callers that drive leases themselves; a worker's
// handler returns Sleep, SleepUntil or WaitForSignal instead.
func (c *Client) Suspend(ctx context.Context, id ExecutionID, epoch int64, p SuspendParams) (*Suspended, error) {
	return leases.Suspend(ctx, c.pool, id, epoch, p)
}

// SuspendTx is Suspend inside tx.
func (c *Client) SuspendTx(ctx context.Context, tx pgx.Tx, id ExecutionID, epoch int64, p SuspendParams) (*Suspended, error) {
	return leases.Suspend(ctx, tx, id, epoch, p)
}

// Signal sends a named signal with a payload to a flow or an execution.
// It ends the wait of the first execution that waits for its name (for
// a flow: the first-created member waiting), or is kept until one
// waits: a signal is never lost and taken once. A finished flow or
// execution refuses it with an AlreadyTerminalError.
func (c *Client) Signal(ctx context.Context, p SignalParams) (*SignalResult, error) {
	return leases.Signal(ctx, c.pool, c.limits, p)
}

// SignalTx is Signal inside tx: the signal is sent, and its wait ended,
// when tx commits, and not at all if it rolls back.
func (c *Client) SignalTx(ctx context.Context, tx pgx.Tx, p SignalParams) (*SignalResult, error) {
	return leases.Signal(ctx, tx, c.limits, p)
}

// Wake reads what an execution last waited for and how that wait ended;
// nil when it never waited.
func (c *Client) Wake(ctx context.Context, id ExecutionID) (*Wake, error) {
	return leases.Wake(ctx, c.pool, id)
}

// Wake reads what the execution's last wait was and what ended it (the
// signal received, with its payload): nil when it never waited. A
// handler that waits calls it first, to know where it stands.
func (j *Job) Wake(ctx context.Context) (*Wake, error) {
	if j.client == nil {
		return nil, fmt.Errorf("job %s: no client", j.ID)
	}
	return leases.Wake(ctx, j.client.pool, j.ID)
}

// FlowSignals lists the signals sent to a flow or to its members, oldest
// first, at most limit (1..1000).
func (c *Client) FlowSignals(ctx context.Context, flowID uuid.UUID, limit int) ([]Signal, error) {
	return leases.Signals(ctx, c.pool, ident.Partition(flowID), flowID, limit)
}

// ExecutionSignals lists the signals sent to an execution, oldest first,
// at most limit (1..1000).
func (c *Client) ExecutionSignals(ctx context.Context, id ExecutionID, limit int) ([]Signal, error) {
	return leases.Signals(ctx, c.pool, id.Partition, id.UUID, limit)
}
