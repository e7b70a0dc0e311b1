package ffd_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/flowfabric/ffd"
	"github.com/flowfabric/ffd/internal/ident"
)

// 1,000 events, half published from Go and half from SQL in the
// publisher's transaction, each published twice (the second time by the
// other way), fired by two daemons at once: each starts its flow once,
// with the id its trigger and event derive; a filtered trigger starts an
// execution for the events its filter matches only; an event published
// in a transaction rolled back starts nothing.
func TestEventTriggersStartOnce(t *testing.T) {
	t.Parallel()
	f := setup(t)
	flow := ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{
		{Ref: "charge", Params: ffd.CreateParams{Lane: "orders", Kind: "charge"}},
		{Ref: "ship", Params: ffd.CreateParams{Lane: "orders", Kind: "ship"}}},
		Edges: []ffd.SubmitEdge{{From: "charge", To: "ship"}}}
	if _, err := f.client.CreateTrigger(f.Ctx, ffd.TriggerParams{Name: "order-flow", Event: "order.placed", Flow: &flow}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.CreateTrigger(f.Ctx, ffd.TriggerParams{Name: "vip-audit", Event: "order.placed",
		Filter: map[string]any{"vip": true}, Execution: &ffd.CreateParams{Lane: "audit", Kind: "audit"}}); err != nil {
		t.Fatal(err)
	}
	const n = 1000
	viaSQL := func(i int) string {
		var id string
		err := pgx.BeginFunc(f.Ctx, f.Pool, func(tx pgx.Tx) error {
			return tx.QueryRow(f.Ctx, `SELECT ff_publish_event('default', 'order.placed', $1, $2::jsonb)::text`,
				fmt.Sprint("o-", i), fmt.Sprintf(`{"i": %d, "vip": %v}`, i, i%10 == 0)).Scan(&id)
		})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	viaGo := func(i int) (*ffd.Published, error) {
		return f.client.PublishEvent(f.Ctx, ffd.PublishParams{Name: "order.placed", Key: fmt.Sprint("o-", i),
			JSON: map[string]any{"i": i, "vip": i%10 == 0}})
	}
	ids := make([]string, n)
	for i := range n {
		if i%2 == 0 {
			p, err := viaGo(i)
			if err != nil || p.Existed {
				t.Fatalf("publish %d: %+v, %v", i, p, err)
			}
			ids[i] = p.Event.ID.String()
		} else {
			ids[i] = viaSQL(i)
		}
	}
	for i := range n { // again, the other way
		if i%2 == 0 {
			if again := viaSQL(i); again != ids[i] {
				t.Fatalf("event %d published again from SQL: %s, want %s", i, again, ids[i])
			}
		} else if p, err := viaGo(i); err != nil || !p.Existed || p.Event.ID.String() != ids[i] {
			t.Fatalf("event %d published again from Go: %+v, %v; want the first, existed", i, p, err)
		}
	}
	tx, err := f.Pool.Begin(f.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.PublishEventTx(f.Ctx, tx, ffd.PublishParams{Name: "order.placed", Key: "rolled-back"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(f.Ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		f.startDaemon()
	}
	f.WaitFor("1,000 events fired", func() bool {
		return f.Count(`SELECT count(*) FROM ff_event WHERE fired_at IS NOT NULL`) == n
	})
	if got := f.Count(`SELECT count(*) FROM ff_event`); got != n {
		t.Fatalf("%d events stored, want %d", got, n)
	}
	if got := f.Count(`SELECT count(*) FROM ff_flow`); got != n {
		t.Fatalf("%d flows started, want one per event: %d", got, n)
	}
	if got := f.Count(`SELECT count(*) FROM ff_execution WHERE lane = 'audit'`); got != n/10 {
		t.Fatalf("%d audits, want one per VIP event: %d", got, n/10)
	}
	// Each event's id, from Go and from SQL, lies on its partition, and
	// so does all it started.
	if got := f.Count(`SELECT count(*) FROM ff_event WHERE ff_uuid_in_partition(event_id, partition_key) = event_id`); got != n {
		t.Fatalf("%d of %d events have an id on their partition, want all", got, n)
	}
	if got := f.Count(`SELECT count(*) FROM ff_execution x LEFT JOIN ff_flow fl ON fl.flow_id = x.flow_id
		JOIN ff_event e ON coalesce(fl.tags, x.tags)->>'ffd_event' = e.event_id::text
		WHERE x.partition_key = e.partition_key`); got != 2*n+n/10 {
		t.Fatalf("%d executions on their event's partition, want all %d", got, 2*n+n/10)
	}
	for _, i := range []int{0, 1, 499, 998} {
		id := uuid.MustParse(ids[i])
		if _, err := f.client.DescribeFlow(f.Ctx, ffd.TriggerFlowID("order-flow", id)); err != nil {
			t.Fatalf("the flow of event %d: %v; want the id its trigger and event derive", i, err)
		}
		e, err := f.client.GetEvent(f.Ctx, id)
		if want := 1 + map[bool]int{true: 1}[i%10 == 0]; err != nil || e.FiredAt == nil || e.Started != want || e.Error != "" {
			t.Fatalf("event %d: %+v, %v; want fired, %d started", i, e, err, want)
		}
	}
	// The event's payload is each step's (their templates have none).
	page, err := f.client.List(f.Ctx, ffd.ListParams{FlowID: ptr(ffd.TriggerFlowID("order-flow", uuid.MustParse(ids[10])))})
	if err != nil || len(page.Executions) != 2 {
		t.Fatalf("the steps of event 10's flow: %v, %v", page, err)
	}
	for _, x := range page.Executions {
		var in struct {
			I   int
			VIP bool
		}
		if err := json.Unmarshal(x.Payload, &in); err != nil || in.I != 10 || !in.VIP {
			t.Fatalf("step %s of event 10's flow has payload %s; want the event's", x.Step, x.Payload)
		}
	}
	ts, err := f.client.ListTriggers(f.Ctx)
	if err != nil || len(ts) != 2 || ts[0].Name != "order-flow" || ts[0].Fired != n || ts[1].Fired != n/10 {
		t.Fatalf("triggers: %+v, %v; want order-flow fired %d, vip-audit %d", ts, err, n, n/10)
	}
}

// Triggers and events that could not fire are refused with typed errors,
// and nothing is written; a deleted trigger starts nothing more.
func TestEventTriggersRefuseBadInput(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ok := ffd.CreateParams{Lane: "l"}
	cyclic := ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{{Ref: "a", Params: ok}, {Ref: "b", Params: ok}},
		Edges: []ffd.SubmitEdge{{From: "a", To: "b"}, {From: "b", To: "a"}}}
	for _, c := range []struct {
		name string
		p    ffd.TriggerParams
	}{
		{"a bad lane in the template", ffd.TriggerParams{Name: "t", Event: "e", Execution: &ffd.CreateParams{Lane: "bad lane"}}},
		{"a flow with a cycle", ffd.TriggerParams{Name: "t", Event: "e", Flow: &cyclic}},
		{"no target", ffd.TriggerParams{Name: "t", Event: "e"}},
		{"two targets", ffd.TriggerParams{Name: "t", Event: "e", Execution: &ok, Flow: &cyclic}},
		{"an idempotency key", ffd.TriggerParams{Name: "t", Event: "e", Execution: &ffd.CreateParams{Lane: "l", IdempotencyKey: "k"}}},
		{"a bad name", ffd.TriggerParams{Name: "bad name", Event: "e", Execution: &ok}},
		{"a bad event", ffd.TriggerParams{Name: "t", Event: "", Execution: &ok}},
		{"a filter that is not JSON", ffd.TriggerParams{Name: "t", Event: "e", Filter: map[string]any{"f": func() {}}, Execution: &ok}},
	} {
		var ve *ffd.ValidationError
		if _, err := f.client.CreateTrigger(f.Ctx, c.p); !errors.As(err, &ve) {
			t.Errorf("%s: %v; want a ValidationError", c.name, err)
		}
	}
	for _, c := range []struct {
		name string
		p    ffd.PublishParams
	}{
		{"a payload that is not JSON", ffd.PublishParams{Name: "e", Payload: []byte("{nope")}},
		{"a bad name", ffd.PublishParams{Name: "bad name"}},
		{"a key too long", ffd.PublishParams{Name: "e", Key: strings.Repeat("k", 513)}},
	} {
		var ve *ffd.ValidationError
		if _, err := f.client.PublishEvent(f.Ctx, c.p); !errors.As(err, &ve) {
			t.Errorf("publish with %s: %v; want a ValidationError", c.name, err)
		}
	}
	if n := f.Count(`SELECT (SELECT count(*) FROM ff_trigger) + (SELECT count(*) FROM ff_event)`); n != 0 {
		t.Fatalf("%d rows written by refused calls, want 0", n)
	}
	if _, err := f.client.CreateTrigger(f.Ctx, ffd.TriggerParams{Name: "t", Event: "e", Execution: &ok}); err != nil {
		t.Fatal(err)
	}
	var ce *ffd.ConflictError
	if _, err := f.client.CreateTrigger(f.Ctx, ffd.TriggerParams{Name: "t", Event: "e", Execution: &ok}); !errors.As(err, &ce) {
		t.Fatalf("a second trigger named t: %v; want a ConflictError", err)
	}
	if err := f.client.DeleteTrigger(f.Ctx, "t"); err != nil {
		t.Fatal(err)
	}
	var nf *ffd.NotFoundError
	if err := f.client.DeleteTrigger(f.Ctx, "t"); !errors.As(err, &nf) {
		t.Fatalf("delete a deleted trigger: %v; want a NotFoundError", err)
	}
	p, err := f.client.PublishEvent(f.Ctx, ffd.PublishParams{Name: "e"})
	if err != nil {
		t.Fatal(err)
	}
	d, err := ffd.NewDaemon(f.Pool, &ffd.DaemonConfig{Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(f.Ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = d.Stop(ctx)
	}()
	f.WaitFor("the event fired", func() bool {
		e, err := f.client.GetEvent(f.Ctx, p.Event.ID)
		return err == nil && e.FiredAt != nil
	})
	if n := f.Count(`SELECT count(*) FROM ff_execution`); n != 0 {
		t.Fatalf("a deleted trigger started %d executions", n)
	}
}

// ff_key_partition places a key where ident.KeyPartition does, for keys
// of every shape, so a program in any language places keyed rows as ffd
// does.
func TestKeyPartitionInSQL(t *testing.T) {
	t.Parallel()
	f := setup(t)
	var mu sync.Mutex
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 300 {
		mu.Lock()
		b := make([]rune, r.IntN(40))
		for j := range b {
			b[j] = rune(1 + r.IntN(0x2FFF))
		}
		mu.Unlock()
		ns, key := fmt.Sprint("ns", i%7), string(b)
		if i == 0 {
			key = ""
		}
		var got int16
		if err := f.Pool.QueryRow(f.Ctx, `SELECT ff_key_partition($1, $2)`, ns, key).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if want := ident.KeyPartition(ns, key); got != want {
			t.Fatalf("ff_key_partition(%q, %q) = %d, want %d (ident.KeyPartition)", ns, key, got, want)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// A trigger whose target cannot start for an event (here: it gives a key
// a limit of 2, and the key was made strict since) leaves its failure on
// the event, which is fired all the same; the event's other trigger
// starts its target.
func TestEventTriggerFailureIsKept(t *testing.T) {
	t.Parallel()
	f := setup(t)
	if _, err := f.client.CreateTrigger(f.Ctx, ffd.TriggerParams{Name: "limited", Event: "e",
		Execution: &ffd.CreateParams{Lane: "l", ConcurrencyKey: "k", ConcurrencyLimit: 2}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.CreateTrigger(f.Ctx, ffd.TriggerParams{Name: "plain", Event: "e", Execution: &ffd.CreateParams{Lane: "m"}}); err != nil {
		t.Fatal(err)
	}
	strict := ffd.OrderStrict
	if _, err := f.client.SetKey(f.Ctx, "l", "k", ffd.KeyParams{Order: &strict}, ffd.NewLane()); err != nil {
		t.Fatal(err)
	}
	p, err := f.client.PublishEvent(f.Ctx, ffd.PublishParams{Name: "e"})
	if err != nil {
		t.Fatal(err)
	}
	f.startDaemon()
	ctx, cancel := context.WithTimeout(f.Ctx, 2*time.Minute)
	defer cancel()
	e, err := f.client.WaitEvent(ctx, p.Event.ID)
	if err != nil || e.Started != 1 || !strings.Contains(e.Error, "trigger limited") || !strings.Contains(e.Error, "strict order") {
		t.Fatalf("the event: %+v, %v; want fired, 1 started, the failure of trigger limited kept", e, err)
	}
	if n := f.Count(`SELECT count(*) FROM ff_execution WHERE lane = 'm'`); n != 1 {
		t.Fatalf("%d executions of the plain trigger, want 1", n)
	}
}
