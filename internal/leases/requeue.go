package leases

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/store"
)

// Held names a lease: an execution and the epoch its holder claimed it at.
type Held struct {
	ID    ffdtype.ExecutionID
	Epoch int64
}

// HandBack gives leases back because their holder is stopping: in one
// transaction, each execution with attempts left is pending again at once
// (no backoff, so another worker picks it up straight away) and each
// without is failed with msg. Items whose lease already moved on are left
// alone. It returns how many were requeued and how many failed.
func HandBack(ctx context.Context, db store.DB, held []Held, msg string) (requeued, failed int, err error) {
	if len(held) == 0 {
		return 0, 0, nil
	}
	msg = CleanText(msg, MaxErrorBytes)
	items := make([]store.RequeueItem, len(held))
	ends := make([]store.Termination, len(held))
	for i, h := range held {
		if err := validateFence(h.ID, h.Epoch); err != nil {
			return 0, 0, err
		}
		items[i] = store.RequeueItem{ID: h.ID, Epoch: h.Epoch, Error: msg}
		ends[i] = store.Termination{ID: h.ID, Epoch: h.Epoch, State: ffdtype.StateFailed, Error: msg}
	}
	err = store.InTx(ctx, db, func(tx pgx.Tx) error {
		rq, err := store.Requeue(ctx, tx, store.RequeueFailedNow, false, items)
		if err != nil {
			return err
		}
		// Terminate is fenced on the epoch, which requeue left unchanged:
		// drop what was just requeued (now pending) so only the exhausted
		// ones are failed.
		back := make(map[ffdtype.ExecutionID]bool, len(rq))
		for _, r := range rq {
			back[r.ID] = true
		}
		rest := ends[:0:0]
		for _, e := range ends {
			if !back[e.ID] {
				rest = append(rest, e)
			}
		}
		ended, err := store.Terminate(ctx, tx, rest)
		if err != nil {
			return err
		}
		requeued, failed = len(rq), len(ended)
		return nil
	})
	if err != nil {
		return 0, 0, wrap(fmt.Sprintf("hand back %d leases", len(held)), err)
	}
	return requeued, failed, nil
}
