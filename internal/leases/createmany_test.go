package leases_test

import (
	"bytes"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/store"
)

// CreateMany writes every parameter of every row as Create would, in one
// statement, and returns the executions in the order asked.
func TestCreateManyMatchesCreate(t *testing.T) {
	t.Parallel()
	f := setup(t)
	var ps []leases.CreateParams
	for i := range 40 {
		p := leases.CreateParams{Lane: fmt.Sprint("many-", i%3), Kind: fmt.Sprint("k", i), Priority: i % 5,
			Payload: []byte(fmt.Sprint("payload ", i)), MaxAttempts: 1 + i%4,
			Retry:    store.RetryPolicy{Base: time.Duration(1+i) * time.Millisecond, Max: time.Minute, Multiplier: 1.5, Jitter: 0.2},
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
		wantState := store.StatePending
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
	if _, err := leases.CreateMany(f.Ctx, f.Pool, leases.Limits{}, []leases.CreateParams{{Lane: "many-0"}, {Lane: ""}}); err == nil {
		t.Fatal("a batch with an invalid row was accepted")
	}
	var n int
	if err := f.Pool.QueryRow(f.Ctx, `SELECT count(*) FROM ff_execution`).Scan(&n); err != nil || n != len(ps) {
		t.Fatalf("%d executions stored (%v), want %d: the invalid batch wrote something", n, err, len(ps))
	}
}
