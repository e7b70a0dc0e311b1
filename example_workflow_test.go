package ffd_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/flowfabric/ffd"
)

// engine starts a daemon and a worker for an example, and returns the
// client and what stops them.
func engine(lanes []string, kinds *ffd.Kinds) (*ffd.Client, func()) {
	ctx := context.Background()
	pool, err := ffd.NewPool(ctx, os.Getenv("FFD_DATABASE_URL"), nil)
	if err != nil {
		panic(err)
	}
	quiet := zap.NewNop()
	client, _ := ffd.NewClient(pool, &ffd.Config{Logger: quiet})
	daemon, _ := ffd.NewDaemon(pool, &ffd.DaemonConfig{Logger: quiet})
	if err := daemon.Start(ctx); err != nil {
		panic(err)
	}
	worker, _ := ffd.NewWorker(client, ffd.WorkerConfig{Lanes: lanes, Kinds: kinds})
	if err := worker.Start(ctx); err != nil {
		panic(err)
	}
	return client, func() {
		_ = worker.Stop(ctx)
		_ = daemon.Stop(ctx)
		pool.Close()
	}
}

// Wait for a flow's result instead of polling it: WaitFlow returns when
// the flow ends, with every step's result by name.
func ExampleClient_WaitFlow() {
	kinds := ffd.NewKinds()
	ffd.Handle(kinds, "fetch", func(_ context.Context, _ *ffd.Job, city string) (int, error) {
		return len(city), nil
	})
	ffd.Handle(kinds, "report", func(ctx context.Context, job *ffd.Job, _ struct{}) (string, error) {
		temps, err := ffd.UpstreamResults[int](ctx, job)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("oslo %d, lima %d", temps["oslo"], temps["lima"]), nil
	})
	client, stop := engine([]string{"weather"}, kinds)
	defer stop()

	// --8<-- wait-flow
	ctx := context.Background()
	sub, err := client.SubmitFlow(ctx, ffd.SubmitFlowParams{
		Nodes: []ffd.SubmitNode{
			{Ref: "oslo", Params: ffd.CreateParams{Lane: "weather", Kind: "fetch", JSON: "Oslo"}},
			{Ref: "lima", Params: ffd.CreateParams{Lane: "weather", Kind: "fetch", JSON: "Lima!"}},
			{Ref: "report", Params: ffd.CreateParams{Lane: "weather", Kind: "report"}},
		},
		Edges: []ffd.SubmitEdge{{From: "oslo", To: "report"}, {From: "lima", To: "report"}},
	})
	if err != nil {
		panic(err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, err := client.WaitFlow(waitCtx, sub.Flow.ID)
	if err != nil {
		panic(err)
	}
	fmt.Println(out.Flow.State, string(out.Steps["report"].Result))
	// --8<--

	// Output: completed "oslo 4, lima 5"
}

// Fan out at run time: a step maps over a list it learns as it runs,
// one child per item, and a join sums them.
func ExampleJob_Spawn() {
	kinds := ffd.NewKinds()
	// --8<-- spawn
	ffd.HandleBytes(kinds, "split", func(ctx context.Context, job *ffd.Job) ([]byte, error) {
		var items []ffd.CreateParams
		for _, n := range []int{3, 4, 5} { // known only now, say from a listing
			items = append(items, ffd.CreateParams{Lane: "map", Kind: "square", JSON: n})
		}
		join := &ffd.SubmitNode{Ref: "sum", Params: ffd.CreateParams{Lane: "map", Kind: "sum"}}
		if err := job.Spawn(ffd.Map("square", items, join)); err != nil {
			return nil, err
		}
		return nil, nil // the children and the join are written with this completion
	})
	ffd.Handle(kinds, "square", func(_ context.Context, _ *ffd.Job, n int) (int, error) { return n * n, nil })
	ffd.Handle(kinds, "sum", func(ctx context.Context, job *ffd.Job, _ struct{}) (int, error) {
		squares, err := ffd.UpstreamResults[int](ctx, job)
		if err != nil {
			return 0, err
		}
		sum := 0
		for _, sq := range squares {
			sum += sq
		}
		return sum, nil
	})
	// --8<--
	client, stop := engine([]string{"map"}, kinds)
	defer stop()

	ctx := context.Background()
	sub, err := client.SubmitFlow(ctx, ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{
		{Ref: "split", Params: ffd.CreateParams{Lane: "map", Kind: "split"}},
	}})
	if err != nil {
		panic(err)
	}
	out, err := client.WaitFlow(ctx, sub.Flow.ID)
	if err != nil {
		panic(err)
	}
	fmt.Println(len(out.Members), "steps;", "sum", string(out.Steps["sum"].Result))
	// Output: 5 steps; sum 50
}

// A step waits for a person's approval: it ends its attempt waiting for
// a signal, holding no worker slot; the application sends the signal;
// the step runs again and reads it.
func ExampleWaitForSignal() {
	kinds := ffd.NewKinds()
	// --8<-- signal
	ffd.HandleBytes(kinds, "publish", func(ctx context.Context, job *ffd.Job) ([]byte, error) {
		wake, err := job.Wake(ctx)
		if err != nil {
			return nil, err
		}
		if wake == nil { // the first run: ask, and wait up to a day
			return nil, ffd.WaitForSignal("approval", 24*time.Hour)
		}
		if wake.Reason != ffd.WokenBySignal {
			return nil, ffd.Permanent(fmt.Errorf("nobody approved within a day"))
		}
		return []byte("published, approved by " + string(wake.Received.Payload)), nil
	})
	// --8<--
	client, stop := engine([]string{"editorial"}, kinds)
	defer stop()

	ctx := context.Background()
	created, err := client.Create(ctx, ffd.CreateParams{Lane: "editorial", Kind: "publish"})
	if err != nil {
		panic(err)
	}
	id := created.Execution.ID
	for { // in an application, a person clicks later
		if w, _ := client.Wake(ctx, id); w != nil && w.Waiting {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	// --8<-- send
	if _, err := client.Signal(ctx, ffd.SignalParams{Execution: &id, Name: "approval", Payload: []byte("ada")}); err != nil {
		panic(err)
	}
	// --8<--
	x, err := client.WaitExecution(ctx, id)
	if err != nil {
		panic(err)
	}
	fmt.Println(x.State, string(x.Result))
	// Output: completed published, approved by ada
}

// A durable sleep: the step ends its attempt and is claimed again when
// the time comes, by any worker, whatever restarted meanwhile.
func ExampleSleep() {
	kinds := ffd.NewKinds()
	// --8<-- sleep
	ffd.HandleBytes(kinds, "remind", func(ctx context.Context, job *ffd.Job) ([]byte, error) {
		wake, err := job.Wake(ctx)
		if err != nil {
			return nil, err
		}
		if wake == nil {
			return nil, ffd.Sleep(200 * time.Millisecond) // in an application: 72 * time.Hour
		}
		return []byte("reminded after " + strconv.Itoa(wake.Waits) + " sleep"), nil
	})
	// --8<--
	client, stop := engine([]string{"reminders"}, kinds)
	defer stop()

	ctx := context.Background()
	created, err := client.Create(ctx, ffd.CreateParams{Lane: "reminders", Kind: "remind"})
	if err != nil {
		panic(err)
	}
	x, err := client.WaitExecution(ctx, created.Execution.ID)
	if err != nil {
		panic(err)
	}
	fmt.Println(x.State, string(x.Result))
	// Output: completed reminded after 1 sleep
}

// Start a flow when an event happens: a trigger names the event and the
// flow; each event starts it once, however often it is published.
func ExampleClient_CreateTrigger() {
	kinds := ffd.NewKinds()
	ffd.Handle(kinds, "welcome", func(_ context.Context, _ *ffd.Job, in struct{ User string }) (string, error) {
		return "welcome, " + in.User, nil
	})
	client, stop := engine([]string{"signups"}, kinds)
	defer stop()

	// --8<-- trigger
	ctx := context.Background()
	_, err := client.CreateTrigger(ctx, ffd.TriggerParams{
		Name:  "welcome-new-users",
		Event: "user.signed_up",
		Flow: &ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{
			{Ref: "welcome", Params: ffd.CreateParams{Lane: "signups", Kind: "welcome"}},
		}},
	})
	if err != nil {
		panic(err)
	}
	// The event's payload is the payload of each step that has none of its
	// own; its key makes it once: the second publication is the first event.
	first, err := client.PublishEvent(ctx, ffd.PublishParams{Name: "user.signed_up", Key: "user-42", JSON: map[string]string{"User": "ada"}})
	if err != nil {
		panic(err)
	}
	again, err := client.PublishEvent(ctx, ffd.PublishParams{Name: "user.signed_up", Key: "user-42", JSON: map[string]string{"User": "ada"}})
	if err != nil {
		panic(err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := client.WaitEvent(waitCtx, first.Event.ID); err != nil { // fired: its flow exists
		panic(err)
	}
	out, err := client.WaitFlow(waitCtx, ffd.TriggerFlowID("welcome-new-users", first.Event.ID))
	if err != nil {
		panic(err)
	}
	fmt.Println(again.Existed, out.Flow.State, string(out.Steps["welcome"].Result))
	// --8<--

	// Output: true completed "welcome, ada"
}

// A whole flow as one step: the shipping step's body is a flow of its
// own, started when the step may run; the step ends as its child ends,
// with the results of the child's last steps.
func ExampleSubmitNode_subflow() {
	kinds := ffd.NewKinds()
	for _, kind := range []string{"order", "pick", "pack", "notify"} {
		ffd.Handle(kinds, kind, func(_ context.Context, _ *ffd.Job, _ struct{}) (string, error) { return kind + "ed", nil })
	}
	client, stop := engine([]string{"shop"}, kinds)
	defer stop()

	// --8<-- subflow
	ctx := context.Background()
	sub, err := client.SubmitFlow(ctx, ffd.SubmitFlowParams{
		Nodes: []ffd.SubmitNode{
			{Ref: "order", Params: ffd.CreateParams{Lane: "shop", Kind: "order"}},
			// A step whose body is a flow: no lane, no payload of its own.
			{Ref: "shipping", Flow: &ffd.SubmitFlowParams{
				Nodes: []ffd.SubmitNode{
					{Ref: "pick", Params: ffd.CreateParams{Lane: "shop", Kind: "pick"}},
					{Ref: "pack", Params: ffd.CreateParams{Lane: "shop", Kind: "pack"}},
				},
				Edges: []ffd.SubmitEdge{{From: "pick", To: "pack"}},
			}},
			{Ref: "notify", Params: ffd.CreateParams{Lane: "shop", Kind: "notify"}},
		},
		Edges: []ffd.SubmitEdge{{From: "order", To: "shipping"}, {From: "shipping", To: "notify"}},
	})
	if err != nil {
		panic(err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, err := client.WaitFlow(waitCtx, sub.Flow.ID)
	if err != nil {
		panic(err)
	}
	var shipped ffd.SubflowResult // the step's result
	if err := json.Unmarshal(out.Steps["shipping"].Result, &shipped); err != nil {
		panic(err)
	}
	child, err := client.ChildFlow(ctx, out.Steps["shipping"].ID)
	if err != nil {
		panic(err)
	}
	fmt.Println(out.Flow.State, shipped.State, string(shipped.Results["pack"]), *child.Parent == out.Steps["shipping"].ID)
	// --8<--

	// Output: completed completed "packed" true
}

// A saga: each booking names the step that undoes it. When the car
// cannot be booked, the flow fails, and the bookings made are undone,
// the last one first; the on-failure step runs once with the failure.
func ExampleSubmitNode_compensate() {
	var mu sync.Mutex
	var undone []string
	kinds := ffd.NewKinds()
	ffd.HandleBytes(kinds, "book", func(_ context.Context, job *ffd.Job) ([]byte, error) {
		if job.Step == "car" {
			return nil, ffd.Permanent(errors.New("no cars left"))
		}
		return nil, nil
	})
	ffd.HandleBytes(kinds, "unbook", func(_ context.Context, job *ffd.Job) ([]byte, error) {
		mu.Lock()
		defer mu.Unlock()
		undone = append(undone, job.Step)
		return nil, nil
	})
	ffd.Handle(kinds, "apologize", func(_ context.Context, _ *ffd.Job, f ffd.Failure) (string, error) {
		return fmt.Sprintf("sorry: %s %s", f.Failed[0].Step, f.Failed[0].State), nil
	})
	client, stop := engine([]string{"trips"}, kinds)
	defer stop()

	// --8<-- compensate
	ctx := context.Background()
	book := ffd.CreateParams{Lane: "trips", Kind: "book"}
	unbook := &ffd.CreateParams{Lane: "trips", Kind: "unbook", MaxAttempts: 25} // retried like any step
	sub, err := client.SubmitFlow(ctx, ffd.SubmitFlowParams{
		Flow: ffd.CreateFlowParams{OnFailure: &ffd.CreateParams{Lane: "trips", Kind: "apologize"}},
		Nodes: []ffd.SubmitNode{
			{Ref: "flight", Params: book, Compensate: unbook},
			{Ref: "hotel", Params: book, Compensate: unbook},
			{Ref: "car", Params: book, Compensate: unbook},
		},
		Edges: []ffd.SubmitEdge{{From: "flight", To: "hotel"}, {From: "hotel", To: "car"}},
	})
	if err != nil {
		panic(err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	comp, err := client.WaitCompensation(waitCtx, sub.Flow.ID) // the compensation flow, once it ended
	if err != nil {
		panic(err)
	}
	mu.Lock()
	defer mu.Unlock()
	fmt.Println(comp.Flow.State, undone, string(comp.Steps[ffd.OnFailureStep].Result))
	// --8<--

	// Output: completed [hotel flight] "sorry: car failed"
}

// Versions: a flow runs under the version of the handlers it started
// with. Flows started on v1 finish on v1 workers while new flows run on
// v2 workers, side by side, through a rollout.
func ExampleWorkerConfig_versions() {
	ctx := context.Background()
	ran := func(version string) *ffd.Kinds {
		kinds := ffd.NewKinds()
		ffd.HandleBytes(kinds, "bill", func(_ context.Context, job *ffd.Job) ([]byte, error) {
			return []byte(`"billed by ` + version + `"`), nil
		})
		return kinds
	}
	client, stop := engine([]string{"unused"}, ran("none"))
	defer stop()

	// --8<-- versions
	// The old release's workers serve v1; Start announces the version.
	v1, err := ffd.NewWorker(client, ffd.WorkerConfig{Lanes: []string{"billing"}, Kinds: ran("v1"), Versions: []string{"v1"}})
	if err != nil {
		panic(err)
	}
	if err := v1.Start(ctx); err != nil {
		panic(err)
	}
	defer v1.Stop(ctx)
	bill := ffd.SubmitFlowParams{
		Nodes: []ffd.SubmitNode{{Ref: "bill", Params: ffd.CreateParams{Lane: "billing", Kind: "bill"}}},
	}
	bill.Flow.Version = "v1"
	old, err := client.SubmitFlow(ctx, bill)
	if err != nil {
		panic(err)
	}
	// The new release's workers serve v2, beside the old ones; producers
	// then start flows under v2.
	v2, err := ffd.NewWorker(client, ffd.WorkerConfig{Lanes: []string{"billing"}, Kinds: ran("v2"), Versions: []string{"v2"}})
	if err != nil {
		panic(err)
	}
	if err := v2.Start(ctx); err != nil {
		panic(err)
	}
	defer v2.Stop(ctx)
	bill.Flow.Version = "v2"
	fresh, err := client.SubmitFlow(ctx, bill)
	if err != nil {
		panic(err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for _, id := range []uuid.UUID{old.Flow.ID, fresh.Flow.ID} {
		out, err := client.WaitFlow(waitCtx, id)
		if err != nil {
			panic(err)
		}
		fmt.Println(out.Flow.Version, string(out.Steps["bill"].Result))
	}
	// --8<--

	// Output:
	// v1 "billed by v1"
	// v2 "billed by v2"
}
