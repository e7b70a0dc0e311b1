package leases_test

import (
	"bytes"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/store"
)

// CreateMany writes every parameter of every row as Create would, in one
// statement, and returns the executions in the order asked.
func TestCreateManyMatchesCreate(t *testing.T) {
	t.Parallel()
	f := setup(t)
	var ps []ffdtype.CreateParams
	for i := range 40 {
		p := ffdtype.CreateParams{Lane: fmt.Sprint("many-", i%3), Kind: fmt.Sprint("k", i), Priority: i % 5,
			Payload: []byte(fmt.Sprint("payload ", i)), MaxAttempts: 1 + i%4,
			Retry:    ffdtype.RetryPolicy{Base: time.Duration(1+i) * time.Millisecond, Max: time.Minute, Multiplier: 1.5, Jitter: 0.2},
			LeaseTTL: time.Duration(10+i) * time.Second}
		switch i % 4 {
		case 0:
			p.RequiredCapabilities = []string{"gpu", fmt.Sprint("c", i)}
			p.Tags = map[string]any{"i": float64(i), "who": "many"}
		case 1:
			p.Delay = time.Hour
			p.AttemptTimeout = time.Minute
		case 2:
			p.Deadline = 2 * time.Hour
		}
		ps = append(ps, p)
	}
	xs, err := leases.CreateMany(f.Ctx, f.Pool, leases.Limits{}, ps)
	if err != nil {
		t.Fatal(err)
	}
	if len(xs) != len(ps) {
		t.Fatalf("%d executions for %d params", len(xs), len(ps))
	}
	for i, x := range xs {
		p := ps[i]
		got, err := leases.Get(f.Ctx, f.Pool, x.ID)
		if err != nil {
			t.Fatal(err)
		}
		caps := p.RequiredCapabilities
		if caps == nil {
			caps = []string{}
		}
		wantState := ffdtype.StatePending
		switch {
		case got.Kind != p.Kind || got.Lane != p.Lane || got.Priority != p.Priority || !bytes.Equal(got.Payload, p.Payload):
			t.Errorf("row %d: kind %q lane %q priority %d payload %q; asked %q %q %d %q", i, got.Kind, got.Lane, got.Priority, got.Payload, p.Kind, p.Lane, p.Priority, p.Payload)
		case got.MaxAttempts != p.MaxAttempts || got.Retry != p.Retry || got.LeaseTTL != p.LeaseTTL || got.AttemptTimeout != p.AttemptTimeout:
			t.Errorf("row %d: attempts %d retry %+v ttl %s timeout %s; asked %d %+v %s %s", i, got.MaxAttempts, got.Retry, got.LeaseTTL, got.AttemptTimeout, p.MaxAttempts, p.Retry, p.LeaseTTL, p.AttemptTimeout)
		case !reflect.DeepEqual(got.RequiredCapabilities, caps) || !reflect.DeepEqual(got.Tags, p.Tags) && (len(got.Tags) > 0 || len(p.Tags) > 0):
			t.Errorf("row %d: capabilities %v tags %v; asked %v %v", i, got.RequiredCapabilities, got.Tags, caps, p.Tags)
		case got.State != wantState:
			t.Errorf("row %d: state %s, want %s", i, got.State, wantState)
		case (p.Delay > 0) != got.RunAt.After(time.Now().Add(30*time.Minute)):
			t.Errorf("row %d: delay %s but run_at %s", i, p.Delay, got.RunAt)
		case (p.Deadline > 0) != (got.DeadlineAt != nil):
			t.Errorf("row %d: deadline %s but deadline_at %v", i, p.Deadline, got.DeadlineAt)
		case x.ID != got.ID:
			t.Errorf("row %d: returned %s, stored %s", i, x.ID, got.ID)
		}
	}
	if _, err := leases.CreateMany(f.Ctx, f.Pool, leases.Limits{}, []ffdtype.CreateParams{{Lane: "many-0"}, {Lane: ""}}); err == nil {
		t.Fatal("a batch with an invalid row was accepted")
	}
	var n int
	if err := f.Pool.QueryRow(f.Ctx, `SELECT count(*) FROM ff_execution`).Scan(&n); err != nil || n != len(ps) {
		t.Fatalf("%d executions stored (%v), want %d: the invalid batch wrote something", n, err, len(ps))
	}
}

// Small batches go in by one statement, large ones by COPY (from
// store.CopyThreshold on); either way CreateMany returns exactly the rows
// it stored, on its own transaction or the caller's, and a COPY batch
// honours delays, deadlines, timeouts, tags and capabilities as the
// statement does.
func TestCreateManyReturnsWhatItStored(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for _, tc := range []struct {
		n    int
		inTx bool
	}{{10, false}, {store.CopyThreshold - 1, false}, {store.CopyThreshold, false}, {300, false}, {200, true}} {
		t.Run(fmt.Sprintf("%d rows, caller tx %v", tc.n, tc.inTx), func(t *testing.T) {
			ps := make([]ffdtype.CreateParams, tc.n)
			for i := range ps {
				ps[i] = ffdtype.CreateParams{Lane: fmt.Sprint("stored-", i%2), Kind: fmt.Sprint("k", i%7), Priority: i % 3,
					Payload: []byte(fmt.Sprintf(`{"i":%d}`, i)), MaxAttempts: 1 + i%5, Step: ""}
				switch i % 5 {
				case 0:
					ps[i].Tags = map[string]any{"n": i, "s": "x", "nested": map[string]any{"ok": true}}
					ps[i].RequiredCapabilities = []string{"gpu"}
				case 1:
					ps[i].Delay = 90*time.Minute + 1500*time.Nanosecond // below a microsecond is dropped, as in SQL
				case 2:
					ps[i].Deadline = time.Hour
					ps[i].AttemptTimeout = 3 * time.Second
				case 3:
					ps[i].Retry = ffdtype.RetryPolicy{Base: 2 * time.Second, Max: time.Hour, Multiplier: 3, Jitter: 0.5}
					ps[i].LeaseTTL = 45 * time.Second
				}
			}
			var xs []*ffdtype.Execution
			var err error
			if tc.inTx {
				tx, terr := f.Pool.Begin(f.Ctx)
				if terr != nil {
					t.Fatal(terr)
				}
				xs, err = leases.CreateMany(f.Ctx, tx, leases.Limits{}, ps)
				if err == nil {
					err = tx.Commit(f.Ctx)
				} else {
					tx.Rollback(f.Ctx)
				}
			} else {
				xs, err = leases.CreateMany(f.Ctx, f.Pool, leases.Limits{}, ps)
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(xs) != tc.n {
				t.Fatalf("%d executions returned, want %d", len(xs), tc.n)
			}
			for i, x := range xs {
				got, err := leases.Get(f.Ctx, f.Pool, x.ID)
				if err != nil {
					t.Fatal(err)
				}
				if a, b := comparable(x), comparable(got); !reflect.DeepEqual(a, b) {
					t.Fatalf("row %d: returned\n%+v\nstored\n%+v", i, a, b)
				}
				if got.Kind != ps[i].Kind || !bytes.Equal(got.Payload, ps[i].Payload) {
					t.Fatalf("row %d stored out of order: kind %q payload %q, asked %q %q", i, got.Kind, got.Payload, ps[i].Kind, ps[i].Payload)
				}
			}
		})
	}
}

// comparable is x with its times in UTC (the clock's reading, not the
// zone it was scanned in).
func comparable(x *ffdtype.Execution) ffdtype.Execution {
	c := *x
	utc := func(t *time.Time) *time.Time {
		if t == nil {
			return nil
		}
		u := t.UTC()
		return &u
	}
	c.RunAt, c.CreatedAt = c.RunAt.UTC(), c.CreatedAt.UTC()
	c.LeaseExpiresAt, c.AttemptDeadlineAt, c.DeadlineAt = utc(c.LeaseExpiresAt), utc(c.AttemptDeadlineAt), utc(c.DeadlineAt)
	c.StartedAt, c.TerminalAt = utc(c.StartedAt), utc(c.TerminalAt)
	return c
}
