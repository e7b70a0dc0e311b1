package ffd_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/flowfabric/ffd"
)

// A worker renews the leases of its long handlers together, in a
// transaction for all that are due, not one transaction per lease; a
// lease the batch finds lost (its epoch moved on, and no notification
// said so) cancels its handler alone, and the others keep theirs to the
// end.
func TestWorkerRenewsLeasesTogether(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const n, rounds = 12, 6
	ps := make([]ffd.CreateParams, n)
	for i := range ps {
		ps[i] = ffd.CreateParams{Lane: "renew-together", LeaseTTL: 1500 * time.Millisecond} // a renewal every 500 ms
	}
	created, err := f.client.CreateMany(f.Ctx, ps)
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	starts := make(chan *ffd.Execution, n)
	causes := make(chan error, n)
	f.startWorker(ffd.WorkerConfig{
		Lanes:       []string{"renew-together"},
		Concurrency: n,
		Handler: func(ctx context.Context, j *ffd.Job) ([]byte, error) {
			starts <- j.Execution
			select {
			case <-release:
				return []byte(`{}`), nil
			case <-ctx.Done():
				causes <- context.Cause(ctx)
				return nil, ctx.Err()
			}
		},
	})
	for range n {
		f.claimedBy(starts)
	}
	renewedAtLeast := func(k int) func() bool {
		return func() bool {
			return f.Count(`SELECT count(*) FROM (SELECT execution_id FROM ff_lease_event WHERE event_type = 'renewed'
				GROUP BY execution_id HAVING count(*) >= $1) r`, k) == n
		}
	}
	f.WaitFor(fmt.Sprintf("every lease to be renewed %d times", rounds), renewedAtLeast(rounds))
	var events, txns int
	if err := f.Pool.QueryRow(f.Ctx, `SELECT count(*), count(DISTINCT txid) FROM ff_lease_event WHERE event_type = 'renewed'`).Scan(&events, &txns); err != nil {
		t.Fatal(err)
	}
	// One transaction a lease each time would be events transactions;
	// batched, each round is one, but for the first (the leases join
	// the renewer as their first renewals fall due, and merge after).
	t.Logf("%d renewals in %d transactions", events, txns)
	if txns*4 > events {
		t.Fatalf("%d renewals in %d transactions; want at most a quarter as many transactions (the due leases renewed together)", events, txns)
	}

	// The epoch of one lease moves on with no notification: the next
	// batch leaves it out, and its renewal alone finds it lost.
	lost := created[0]
	if _, err := f.Pool.Exec(f.Ctx, `UPDATE ff_execution SET lease_epoch = lease_epoch + 1 WHERE partition_key = $1 AND execution_id = $2`,
		lost.ID.Partition, lost.ID.UUID); err != nil {
		t.Fatal(err)
	}
	select {
	case cause := <-causes:
		if !errors.Is(cause, ffd.ErrLeaseLost) {
			t.Fatalf("a handler was cancelled with %v, want ErrLeaseLost", cause)
		}
	case <-f.Ctx.Done():
		t.Fatal("the handler of the lease whose epoch moved on was not cancelled within the test's budget")
	}
	f.WaitFor("the other leases to be renewed again", renewedAtLeastBut(f, lost.ID.UUID, n-1, rounds+2))
	close(release)
	f.WaitFor("the other executions to complete", func() bool {
		return f.Count(`SELECT count(*) FROM ff_execution WHERE lane = 'renew-together' AND state = 'completed' AND attempt = 1 AND lease_epoch = 1`) == n-1
	})
	select {
	case cause := <-causes:
		t.Fatalf("a second handler was cancelled (%v); only the lost lease's should be", cause)
	default:
	}
}

// renewedAtLeastBut says whether want executions other than but have
// been renewed at least k times.
func renewedAtLeastBut(f *fixture, but any, want, k int) func() bool {
	return func() bool {
		return f.Count(`SELECT count(*) FROM (SELECT execution_id FROM ff_lease_event
			WHERE event_type = 'renewed' AND execution_id <> $1
			GROUP BY execution_id HAVING count(*) >= $2) r`, but, k) == want
	}
}
