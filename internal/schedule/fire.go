package schedule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/flows"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/store"
	"github.com/flowfabric/ffd/internal/wire"
)

// flowIDSpace derives the flow id of a tick: the same (schedule, tick)
// always names the same flow.
var flowIDSpace = uuid.MustParse("5b0e6c1e-6f0a-4d1e-9a53-3f0c2b9d7a41")

// FlowID is the id of the flow a tick submits.
func FlowID(name string, tick time.Time) uuid.UUID {
	return uuid.NewSHA1(flowIDSpace, []byte(name+"@"+tick.UTC().Format(time.RFC3339Nano)))
}

// Result is what one Fire pass did.
type Result struct {
	Schedules int // schedules taken
	Ticks     int // ticks that created something
}

// Fire takes up to limit due schedules in one transaction, fires their due
// ticks and moves each past now. A schedule whose firing fails (its
// parameters no longer valid, say) is paused and logged, so that it does
// not fail every pass; the others fire.
func Fire(ctx context.Context, db store.DB, lim leases.Limits, limit int, log *zap.Logger) (Result, error) {
	var res Result
	err := store.InTx(ctx, db, func(tx pgx.Tx) error {
		res = Result{}
		due, err := store.LockDueSchedules(ctx, tx, limit)
		if err != nil || len(due) == 0 {
			return err
		}
		now, err := store.Now(ctx, tx)
		if err != nil {
			return err
		}
		for _, s := range due {
			n, err := fireOne(ctx, tx, lim, s, now)
			if err != nil {
				log.Error("schedule failed to fire; pausing it", zap.String("schedule", s.Name), zap.Error(err))
				if err := store.SetSchedulePaused(ctx, tx, s.Name, true, s.NextRunAt); err != nil {
					return err
				}
				continue
			}
			res.Schedules++
			res.Ticks += n
		}
		return nil
	})
	return res, err
}

// fireOne fires one schedule's due ticks in a savepoint and advances it.
func fireOne(ctx context.Context, tx pgx.Tx, lim leases.Limits, s *store.ScheduleRow, now time.Time) (int, error) {
	spec, err := Parse(s.Cron, s.Timezone)
	if err != nil {
		return 0, err
	}
	ticks, after := spec.Plan(s.NextRunAt, now, string(s.Missed))
	if after.IsZero() {
		return 0, fmt.Errorf("%q has no tick after %s", s.Cron, now.UTC().Format(time.RFC3339))
	}
	fired := 0
	err = store.InTx(ctx, tx, func(sp pgx.Tx) error {
		for _, tick := range ticks {
			created, err := fireTick(ctx, sp, lim, s, tick)
			if err != nil {
				return fmt.Errorf("tick %s: %w", tick.UTC().Format(time.RFC3339), err)
			}
			if created {
				fired++
			}
		}
		return store.AdvanceSchedule(ctx, sp, s.Name, fired, after)
	})
	return fired, err
}

// fireTick creates what one tick asks for; false when it already exists
// (a tick can only be planned twice if a transaction was retried).
func fireTick(ctx context.Context, tx pgx.Tx, lim leases.Limits, s *store.ScheduleRow, tick time.Time) (bool, error) {
	tags := map[string]any{"ffd_schedule": s.Name, "ffd_tick": tick.UTC().Format(time.RFC3339Nano)}
	return Start(ctx, tx, lim, Firing{Namespace: s.Namespace, Target: s.Target, Params: s.Params,
		Key: Key(s.Name, tick), FlowID: FlowID(s.Name, tick), Tags: tags})
}

// Firing is one firing of a stored target: the execution it creates is
// keyed Key, the flow it submits has id FlowID; both carry Tags too.
// Payload, when set, is the payload of the execution, or of each step,
// whose template has none (an event's).
type Firing struct {
	Namespace, Target string
	Params            json.RawMessage
	Key               string
	FlowID            uuid.UUID
	Tags              map[string]any
	Payload           []byte
}

// Start creates what a firing asks for; false when it already exists
// (the same firing again: a transaction retried, a daemon that died
// after creating and before recording it).
func Start(ctx context.Context, tx pgx.Tx, lim leases.Limits, f Firing) (bool, error) {
	ep, fp, err := wire.Decode(f.Params, f.Target)
	if err != nil {
		return false, err
	}
	switch {
	case ep != nil:
		p := *ep
		p.Namespace, p.IdempotencyKey, p.Tags = f.Namespace, f.Key, merge(p.Tags, f.Tags)
		if len(p.Payload) == 0 {
			p.Payload = f.Payload
		}
		// The payload was accepted when the target was stored, by a
		// client whose limit may be larger than the daemon's.
		n, err := leases.Normalize(p, leases.Placement{}, lim.AtLeast(len(p.Payload)))
		if err != nil {
			return false, err
		}
		_, existed, err := leases.Insert(ctx, tx, n)
		return !existed, err
	default:
		p := *fp
		p.Flow.ID, p.Flow.Namespace, p.Flow.Tags = f.FlowID, f.Namespace, merge(p.Flow.Tags, f.Tags)
		if len(f.Payload) > 0 {
			p.Nodes = slices.Clone(p.Nodes)
			for i := range p.Nodes {
				if len(p.Nodes[i].Params.Payload) == 0 {
					p.Nodes[i].Params.Payload = f.Payload
				}
			}
		}
		_, err := flows.Submit(ctx, tx, lim.AtLeast(flows.MaxPayload(p)), p)
		var ce *ffdtype.ConflictError
		if errors.As(err, &ce) && ce.Object == "flow" {
			return false, nil
		}
		return err == nil, err
	}
}

func merge(a, b map[string]any) map[string]any {
	out := make(map[string]any, len(a)+len(b))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}
