package leases

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/fault"
	"github.com/flowfabric/ffd/internal/ident"
	"github.com/flowfabric/ffd/internal/store"
)

// MaxWait bounds a sleep and a signal wait's timeout.
const MaxWait = 366 * 24 * time.Hour

// validateWait checks p and turns it into the wait to record for id.
func validateWait(id ffdtype.ExecutionID, epoch int64, p ffdtype.SuspendParams) (store.Suspension, error) {
	s := store.Suspension{ID: id, Epoch: epoch}
	if err := validateFence(id, epoch); err != nil {
		return s, err
	}
	checkSpan := func(field string, d time.Duration) error {
		if d < time.Millisecond || d > MaxWait {
			return fault.Invalid(ffdtype.KindOutOfRange, field, d.String(), "want 1ms..366 days")
		}
		return nil
	}
	sleep := p.For != 0 || !p.Until.IsZero()
	switch {
	case sleep && p.Signal != "":
		return s, fault.Invalid(ffdtype.KindInvalidValue, "signal", p.Signal, "a wait sleeps (for, until) or waits for a signal, not both; a signal wait's end is its timeout")
	case p.For != 0 && !p.Until.IsZero():
		return s, fault.Invalid(ffdtype.KindInvalidValue, "until", p.Until.String(), "set for or until, not both")
	case p.For != 0:
		if err := checkSpan("for", p.For); err != nil {
			return s, err
		}
		secs := p.For.Seconds()
		s.For, s.Seconds = store.WaitSleep, &secs
	case !p.Until.IsZero():
		until := p.Until
		s.For, s.Until = store.WaitSleep, &until
	case p.Signal != "":
		if err := ValidateName("signal", p.Signal); err != nil {
			return s, err
		}
		s.For, s.Signal = store.WaitSignal, p.Signal
		if p.Timeout != 0 {
			if err := checkSpan("timeout", p.Timeout); err != nil {
				return s, err
			}
			secs := p.Timeout.Seconds()
			s.Seconds = &secs
		}
	default:
		return s, fault.Invalid(ffdtype.KindInvalidValue, "for", "", "a wait needs for, until or signal")
	}
	if p.Timeout != 0 && p.Signal == "" {
		return s, fault.Invalid(ffdtype.KindInvalidValue, "timeout", p.Timeout.String(), "only a signal wait has a timeout")
	}
	return s, nil
}

// Suspend ends the attempt held at epoch in the wait p describes, fenced
// on epoch: the execution goes back to pending, holding no lease, until
// the wait ends. The attempt does not count against max_attempts.
func Suspend(ctx context.Context, db store.DB, id ffdtype.ExecutionID, epoch int64, p ffdtype.SuspendParams) (*ffdtype.Suspended, error) {
	s, err := validateWait(id, epoch, p)
	if err != nil {
		return nil, err
	}
	// The wait's anchor is its flow (store.Suspend), read here. An
	// AddExecutionToFlow racing this wait can leave a signal to the new
	// flow unseen by it; the daemon's sweep (store.MatchSignals) ends
	// such a wait.
	x, err := Get(ctx, db, id)
	if err != nil {
		return nil, err
	}
	s.FlowID = x.FlowID
	out, ok, err := store.Suspend(ctx, db, s)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, explainLost(ctx, db, id, epoch)
	}
	res := &ffdtype.Suspended{Attempt: out.Attempt, RunAt: out.RunAt, Woken: out.Woken}
	if !out.RunAt.Before(store.Never) {
		res.RunAt = time.Time{}
	}
	return res, nil
}

// Signal sends a signal to a flow or an execution; it ends the wait of
// the first that waits for it, or is kept for the first wait to come. A
// finished target refuses it (AlreadyTerminalError).
func Signal(ctx context.Context, db store.DB, lim Limits, p ffdtype.SignalParams) (*ffdtype.SignalResult, error) {
	if err := ValidateName("name", p.Name); err != nil {
		return nil, err
	}
	if p.JSON != nil {
		if p.Payload != nil {
			return nil, fault.Invalid(ffdtype.KindInvalidValue, "json", "", "set payload or json, not both")
		}
		b, err := json.Marshal(p.JSON)
		if err != nil {
			return nil, fault.Invalid(ffdtype.KindInvalidValue, "json", fmt.Sprintf("%T", p.JSON), "not encodable as JSON: "+err.Error())
		}
		p.Payload = b
	}
	if len(p.Payload) > lim.maxPayload() {
		return nil, fault.Invalid(ffdtype.KindTooLarge, "payload", strconv.Itoa(len(p.Payload))+" bytes",
			fmt.Sprintf("at most %d bytes (the client's MaxPayloadBytes)", lim.maxPayload()))
	}
	if p.Payload == nil {
		p.Payload = []byte{}
	}
	s := store.NewSignal{ID: ident.NewUUID(), Name: p.Name, Payload: p.Payload}
	out := ffdtype.Signal{ID: s.ID, Name: p.Name, Payload: p.Payload}
	switch {
	case (p.FlowID == nil) == (p.Execution == nil):
		return nil, fault.Invalid(ffdtype.KindInvalidValue, "flow_id", "", "send a signal to a flow or to an execution: set exactly one of flow_id and execution")
	case p.FlowID != nil:
		f, err := store.GetFlow(ctx, db, *p.FlowID)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, &ffdtype.NotFoundError{Object: "flow", ID: p.FlowID.String()}
		}
		if err != nil {
			return nil, wrap("read flow "+p.FlowID.String(), err)
		}
		if f.State != ffdtype.FlowOpen {
			return nil, &ffdtype.AlreadyTerminalError{Object: "flow", ID: f.ID.String(), State: string(f.State)}
		}
		s.Partition, s.FlowID = f.Partition, &f.ID
		out.FlowID = &f.ID
	default:
		x, err := Get(ctx, db, *p.Execution)
		if err != nil {
			return nil, err
		}
		if x.State.Terminal() {
			return nil, &ffdtype.AlreadyTerminalError{Object: "execution", ID: x.ID.String(), State: string(x.State)}
		}
		u := x.ID.UUID
		s.Partition, s.FlowID, s.Execution = x.ID.Partition, x.FlowID, &u
		out.FlowID, out.Execution = x.FlowID, &x.ID
	}
	sentAt, woke, err := store.SendSignal(ctx, db, s)
	if err != nil {
		return nil, err
	}
	out.SentAt = sentAt
	res := &ffdtype.SignalResult{Signal: out}
	if woke != nil {
		id := ffdtype.ExecutionID{Partition: s.Partition, UUID: *woke}
		res.Woke = &id
		out.ConsumedBy = &id
		res.Signal = out
	}
	return res, nil
}

// Wake reads what an execution last waited for and how the wait ended;
// nil when it never waited.
func Wake(ctx context.Context, db store.DB, id ffdtype.ExecutionID) (*ffdtype.Wake, error) {
	if err := ValidateID("execution_id", id); err != nil {
		return nil, err
	}
	return store.ReadWake(ctx, db, id)
}

// Signals lists the signals sent to a flow (and to its members) or to an
// execution, oldest first, at most limit (1..1000).
func Signals(ctx context.Context, db store.DB, partition int16, target uuid.UUID, limit int) ([]ffdtype.Signal, error) {
	if limit < 1 || limit > 1000 {
		return nil, fault.Invalid(ffdtype.KindOutOfRange, "limit", strconv.Itoa(limit), "want 1..1000")
	}
	return store.ListSignals(ctx, db, partition, target, limit)
}
