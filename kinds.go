package ffd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Kinds routes executions to handlers by their Kind, for a Worker
// (WorkerConfig.Kinds) that runs several kinds. Register typed handlers
// with Handle and byte handlers with HandleBytes. An execution whose kind
// has no handler fails permanently, saying which kinds the worker knows.
type Kinds struct {
	handlers map[string]HandlerFunc
	err      error // a registration refused; NewWorker reports it
	batchMax int   // the largest batch of a HandleBatch kind; 0: none
}

// NewKinds returns an empty set of handlers.
func NewKinds() *Kinds { return &Kinds{handlers: map[string]HandlerFunc{}} }

// Handle registers fn for executions of kind. The payload is decoded from
// JSON into In (an empty payload gives In's zero value; one that does not
// decode fails the execution permanently: retrying cannot fix it), and
// fn's Out is encoded as the JSON result. Return an error wrapped with
// Permanent to fail without retrying. Registering a kind twice is an
// error NewWorker returns.
func Handle[In, Out any](k *Kinds, kind string, fn func(ctx context.Context, job *Job, in In) (Out, error)) {
	k.add(kind, func(ctx context.Context, job *Job) ([]byte, error) {
		var in In
		if len(job.Payload) > 0 {
			if err := json.Unmarshal(job.Payload, &in); err != nil {
				return nil, Permanent(fmt.Errorf("decode the payload of %s as %T: %w", job.ID, in, err))
			}
		}
		out, err := fn(ctx, job, in)
		if err != nil {
			return nil, err
		}
		b, err := json.Marshal(out)
		if err != nil {
			return nil, Permanent(fmt.Errorf("encode the result of %s: %w", job.ID, err))
		}
		return b, nil
	})
}

// HandleBytes registers fn for executions of kind, with the payload and
// the result as bytes.
func HandleBytes(k *Kinds, kind string, fn HandlerFunc) { k.add(kind, fn) }

// add registers fn for kind, reporting whether it did.
func (k *Kinds) add(kind string, fn HandlerFunc) bool {
	switch {
	case fn == nil:
		k.refuse(fmt.Errorf("ffd: kind %q: nil handler", kind))
	case k.handlers[kind] != nil:
		k.refuse(fmt.Errorf("ffd: kind %q registered twice", kind))
	default:
		k.handlers[kind] = fn
		return true
	}
	return false
}

// refuse records a refused registration, for NewWorker to report.
func (k *Kinds) refuse(err error) { k.err = errors.Join(k.err, err) }

// Names lists the registered kinds, sorted.
func (k *Kinds) Names() []string {
	names := make([]string, 0, len(k.handlers))
	for n := range k.handlers {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// route is the HandlerFunc a Worker runs for a Kinds.
func (k *Kinds) route() HandlerFunc {
	known := strings.Join(k.Names(), ", ")
	return func(ctx context.Context, job *Job) ([]byte, error) {
		h := k.handlers[job.Kind]
		if h == nil {
			return nil, Permanent(fmt.Errorf("%w: %q (this worker handles: %s)", ErrUnknownKind, job.Kind, known))
		}
		return h(ctx, job)
	}
}

// ErrUnknownKind is the failure of an execution whose kind the worker
// that claimed it has no handler for.
var ErrUnknownKind = errors.New("no handler for this kind")
