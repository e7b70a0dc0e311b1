package console_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	nhttptest "net/http/httptest"
	"net/url"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/console"
	"github.com/flowfabric/ffd/internal/flows"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/store"
	"github.com/flowfabric/ffd/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// browser starts a headless Chromium for the test; the test fails (it
// does not skip) when none is installed: ./test.sh installs it.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		t.Fatal("no Chromium found: install it (Debian: apt-get install chromium); ./test.sh does")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.Flag("disable-gpu", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancel(); cancelAlloc() })
	return ctx
}

// setup serves a console over a database holding one two-step flow.
func setup(t *testing.T) (*testdb.Fixture, string, *ffdtype.SubmittedFlow) {
	t.Helper()
	f := testdb.Checked(t, 3*time.Minute)
	sub, err := flows.Submit(f.Ctx, f.Pool, leases.Limits{}, ffdtype.SubmitFlowParams{
		Flow:  ffdtype.CreateFlowParams{Kind: "report"},
		Nodes: []ffdtype.SubmitNode{{Ref: "gather", Params: ffdtype.CreateParams{Lane: "console", Kind: "gather"}}, {Ref: "render", Params: ffdtype.CreateParams{Lane: "console", Kind: "render"}}},
		Edges: []ffdtype.SubmitEdge{{From: "gather", To: "render"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	con, err := console.New(console.Config{Pool: f.Pool})
	if err != nil {
		t.Fatal(err)
	}
	return f, httptest(t, con), sub
}

// httptest serves con until the test ends.
func httptest(t *testing.T, con *console.Console) string {
	t.Helper()
	srv := nhttptest.NewServer(con)
	t.Cleanup(func() { srv.Close(); con.Close() })
	return srv.URL
}

// run runs one browser action and returns its value, failing the test on
// an error.
func run[T any](t *testing.T, ctx context.Context, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func navigate(t *testing.T, ctx context.Context, url string) {
	t.Helper()
	if err := chromedp.Do(ctx, chromedp.Navigate(url)); err != nil {
		t.Fatal(err)
	}
}

// In a real browser: the flows list shows the flow; its page draws both
// steps coloured by state; finishing a step recolours its node without a
// reload; the execution, lanes and consumers pages render.
func TestConsoleInABrowser(t *testing.T) {
	t.Parallel()
	f, base, sub := setup(t)
	ctx := browser(t)
	navigate(t, ctx, base+"/flows")
	if list := run(t, ctx, chromedp.Text(chromedp.CSS("#flows"))); !strings.Contains(list, sub.Flow.ID.String()) || !strings.Contains(list, "report") {
		t.Fatalf("flows list %q; want the report flow", list)
	}

	gather := sub.Executions["gather"].ID.String()
	sel := fmt.Sprintf(`g.node[data-id="%s"]`, gather)
	fillOf := fmt.Sprintf(`getComputedStyle(document.querySelector('%s rect')).fill`, sel)
	navigate(t, ctx, base+"/flows/"+sub.Flow.ID.String())
	nodes := run(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll("g.node").length`))
	state := run(t, ctx, chromedp.AttributeValue(chromedp.CSS(sel), "data-state"))
	fill := run(t, ctx, chromedp.Evaluate[string](fillOf))
	if nodes != 2 || state.Value != "pending" || fill != "rgb(224, 177, 0)" {
		t.Fatalf("flow page: %d nodes, gather %q filled %s; want 2 nodes, gather pending in amber", nodes, state.Value, fill)
	}

	// Finish gather in the database; the page must follow by itself.
	xs, err := leases.Claim(f.Ctx, f.Pool, ffdtype.ClaimParams{Lane: "console", Worker: "w/1", Max: 1})
	if err != nil || len(xs) != 1 {
		t.Fatalf("claim: %v %v", xs, err)
	}
	if _, err := leases.Complete(f.Ctx, f.Pool, leases.Limits{}, xs[0].ID, xs[0].LeaseEpoch, []byte(`{"rows":3}`)); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(sel+`[data-state="completed"]`))); err != nil {
		t.Fatalf("the node did not turn completed without a reload: %v", err)
	}
	if fill := run(t, ctx, chromedp.Evaluate[string](fillOf)); fill != "rgb(30, 138, 76)" {
		t.Fatalf("a completed node is filled %s, want green", fill)
	}

	if attempts := textAt(t, ctx, base+"/executions/"+xs[0].ID.UUID.String(), "#attempts"); !strings.Contains(attempts, "w/1") || !strings.Contains(attempts, "succeeded") {
		t.Errorf("execution page attempts %q; want w/1 succeeded", attempts)
	}
	if lanes := textAt(t, ctx, base+"/lanes", "#lanes"); !strings.Contains(lanes, "console") {
		t.Errorf("lanes page %q; want the console lane", lanes)
	}
	screenshot(t, ctx, "console-lanes.png")
	if consumers := textAt(t, ctx, base+"/consumers", "#consumers-empty"); !strings.Contains(consumers, "No named consumers") {
		t.Errorf("consumers page %q; want its empty state", consumers)
	}

	// A DAG wider than the window scrolls inside its frame: its last
	// column can be reached, not cut at the right edge.
	var steps []ffdtype.SubmitNode
	var chain []ffdtype.SubmitEdge
	for i := range 14 {
		steps = append(steps, ffdtype.SubmitNode{Ref: fmt.Sprintf("s%02d", i), Params: ffdtype.CreateParams{Lane: "console.wide"}})
		if i > 0 {
			chain = append(chain, ffdtype.SubmitEdge{From: fmt.Sprintf("s%02d", i-1), To: fmt.Sprintf("s%02d", i)})
		}
	}
	wide, err := flows.Submit(f.Ctx, f.Pool, leases.Limits{}, ffdtype.SubmitFlowParams{Nodes: steps, Edges: chain})
	if err != nil {
		t.Fatal(err)
	}
	navigate(t, ctx, base+"/flows/"+wide.Flow.ID.String())
	overflow := run(t, ctx, chromedp.Evaluate[string](`getComputedStyle(document.querySelector(".graph")).overflowX`))
	scrolls := run(t, ctx, chromedp.Evaluate[bool](`(() => { const g = document.querySelector(".graph");
		g.scrollLeft = g.scrollWidth; const last = document.querySelector('g.node[data-step="s13"] rect').getBoundingClientRect();
		return g.scrollWidth > g.clientWidth && last.right <= window.innerWidth && last.left >= 0; })()`))
	if overflow != "auto" || !scrolls {
		t.Fatalf("a 14-column flow: the graph's frame overflows %q, its last step reachable by scrolling: %v; want auto and true", overflow, scrolls)
	}
}

// serve serves a console with auth over f's database.
func serve(t *testing.T, f *testdb.Fixture, auth console.Auth) string {
	t.Helper()
	con, err := console.New(console.Config{Pool: f.Pool, Auth: auth})
	if err != nil {
		t.Fatal(err)
	}
	return httptest(t, con)
}

// Read-only by default: no action shown, every action refused. With a
// token: an action without the browser's form token is refused, one
// without authentication is refused, a cross-origin one is refused; a
// browser that has not signed in sees no action form but a sign-in
// link; after signing in once, its action forms carry no token field
// and cancelling the execution works with one click.
func TestConsoleActions(t *testing.T) {
	t.Parallel()
	f, readOnly, sub := setup(t)
	gather := sub.Executions["gather"].ID
	cancelPath := "/actions/executions/" + gather.UUID.String() + "/cancel"
	if code, _ := post(t, readOnly, cancelPath, url.Values{}, nil); code != http.StatusForbidden {
		t.Fatalf("an action on a read-only console: %d, want 403", code)
	}
	ctx := browser(t)
	navigate(t, ctx, readOnly+"/executions/"+gather.UUID.String())
	if n := run(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll("form").length`)); n != 0 {
		t.Fatalf("a read-only console shows %d action forms", n)
	}

	withToken := serve(t, f, console.Auth{Token: "s3cret"})
	// A script: the bearer token, no cookie, no form token.
	renderCancel := "/actions/executions/" + sub.Executions["render"].ID.UUID.String() + "/cancel"
	if code, _ := post(t, withToken, renderCancel, url.Values{}, http.Header{"Authorization": {"Bearer s3cret"}}); code != http.StatusSeeOther {
		t.Fatalf("a script's action with the bearer token: %d, want 303", code)
	}
	if code, _ := post(t, withToken, cancelPath, url.Values{}, http.Header{"Authorization": {"Bearer wrong"}}); code != http.StatusForbidden {
		t.Fatalf("an action with a wrong bearer token and no form token: %d, want 403", code)
	}
	jar := newSession(t, withToken)
	if code, _ := jar.post(cancelPath, url.Values{}, nil); code != http.StatusUnauthorized {
		t.Fatalf("an action with the form token but no authentication: %d, want 401", code)
	}
	if code, _ := jar.post(cancelPath, url.Values{}, http.Header{"Origin": {"http://evil.example"}, "Authorization": {"Bearer s3cret"}}); code != http.StatusForbidden {
		t.Fatalf("a cross-origin action: %d, want 403", code)
	}

	navigate(t, ctx, withToken+"/executions/"+gather.UUID.String())
	if n := run(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll("main form").length`)); n != 0 {
		t.Fatalf("a browser that has not signed in sees %d action forms, want none", n)
	}
	if err := chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`#sign-in`)),
		chromedp.WaitVisible(chromedp.CSS(`#login input[name=token]`)),
		chromedp.SendKeys(chromedp.CSS(`#login input[name=token]`), "wrong"),
		chromedp.Submit(chromedp.CSS(`#login`)),
		chromedp.WaitVisible(chromedp.CSS(`#wrong-token`)),
		chromedp.SendKeys(chromedp.CSS(`#login input[name=token]`), "s3cret"),
		chromedp.Submit(chromedp.CSS(`#login`)),
		chromedp.WaitVisible(chromedp.CSS(`#cancel-execution button`)),
	); err != nil {
		t.Fatalf("signing in with the token: %v", err)
	}
	if n := run(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll("input[name=token]").length`)); n != 0 {
		t.Fatalf("after signing in, %d forms still ask for the token", n)
	}
	if err := chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`#cancel-execution button`)),
		chromedp.WaitVisible(chromedp.CSS(`h2 span.state.st-cancelled`)),
	); err != nil {
		t.Fatalf("cancelling from the browser: %v", err)
	}
	if n := f.Count(`SELECT count(*) FROM ff_execution WHERE execution_id = $1 AND state = 'cancelled' AND cancelled_by = 'token'`, gather.UUID); n != 1 {
		t.Fatalf("the execution is not cancelled by the console's token user")
	}
	// A cancelled execution offers no Cancel any more.
	if n := run(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll("#cancel-execution").length`)); n != 0 {
		t.Fatalf("a cancelled execution still offers Cancel")
	}
}

func get(t *testing.T, u string) (int, string) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The list's filters (kind prefix, time range), the lanes' finished
// counts and the consumers' lag, over plain HTTP.
func TestConsolePagesRead(t *testing.T) {
	t.Parallel()
	f, base, sub := setup(t)
	id := sub.Flow.ID.String()
	for q, want := range map[string]bool{
		"kind=rep*": true, "kind=zzz*": false, "kind=report": true,
		"from=2000-01-01": true, "to=2000-01-01": false, "state=open": true, "state=failed": false,
	} {
		code, body := get(t, base+"/flows?"+q)
		if code != 200 || strings.Contains(body, id) != want {
			t.Errorf("/flows?%s: %d, lists the flow %v; want %v", q, code, !want, want)
		}
	}
	if code, _ := get(t, base+"/flows?from=yesterday"); code != http.StatusBadRequest {
		t.Errorf("a bad date: %d, want 400", code)
	}
	if err := store.InsertConsumer(f.Ctx, f.Pool, "audit", ffdtype.StreamCompletion, ffdtype.OutboxCursor{}); err != nil {
		t.Fatal(err)
	}
	xs, err := leases.Claim(f.Ctx, f.Pool, ffdtype.ClaimParams{Lane: "console", Worker: "w/1", Max: 1})
	if err != nil || len(xs) != 1 {
		t.Fatalf("claim: %v %v", xs, err)
	}
	if _, err := leases.Complete(f.Ctx, f.Pool, leases.Limits{}, xs[0].ID, xs[0].LeaseEpoch, nil); err != nil {
		t.Fatal(err)
	}
	if _, body := get(t, base+"/lanes"); !regexp.MustCompile(`<td>console</td><td>0</td><td>0</td><td>0</td><td>1</td><td>-</td><td>1</td>`).MatchString(body) ||
		!strings.Contains(body, "Counted now") {
		t.Errorf("lanes page with no daemon sampling: want the console lane counted now, with one blocked (render), no lag and one finished (gather); got %s", body)
	}
	// Once a daemon has sampled, the page shows the sample (one row per
	// lane), not a count: an execution created since is not in it.
	if ok, err := store.SampleLaneStats(f.Ctx, f.Pool, time.Minute, "test"); err != nil || !ok {
		t.Fatalf("sample lane statistics: %v (sampled %v)", err, ok)
	}
	if _, _, err := leases.Create(f.Ctx, f.Pool, leases.Limits{}, ffdtype.CreateParams{Lane: "console"}); err != nil {
		t.Fatal(err)
	}
	if _, body := get(t, base+"/lanes"); !regexp.MustCompile(`<td>console</td><td>0</td><td>0</td><td>0</td><td>1</td><td>-</td><td>1</td>`).MatchString(body) ||
		!strings.Contains(body, "sampled by a daemon") {
		t.Errorf("lanes page after a sample: want the sampled counts (no pending) and where they came from; got %s", body)
	}
	if _, body := get(t, base+"/consumers"); !strings.Contains(body, "audit") || !strings.Contains(body, " s old") {
		t.Errorf("consumers page lacks the audit consumer and its lag: %s", body)
	}
}

// The lanes page shows a lane's rate and the keys holding work back;
// the keys page lists them, held first.
func TestConsoleFlowControl(t *testing.T) {
	t.Parallel()
	f, base, _ := setup(t)
	ps := make([]ffdtype.CreateParams, 5)
	for i := range ps {
		ps[i] = ffdtype.CreateParams{Lane: "tenants", ConcurrencyKey: "acme", ConcurrencyLimit: 1}
	}
	ps = append(ps, ffdtype.CreateParams{Lane: "tenants", ConcurrencyKey: "zeta"})
	if _, err := leases.CreateMany(f.Ctx, f.Pool, leases.Limits{}, ps); err != nil {
		t.Fatal(err)
	}
	// Slow to refill (one token in six minutes), so that the two taken
	// are still missing when the page is read on a loaded machine: at
	// 600 a minute they were back 200 ms later.
	rate := ffdtype.Rate{Count: 10, Per: time.Hour, Burst: 10}
	if _, err := store.SetLane(f.Ctx, f.Pool, "tenants", store.LaneChange{Rate: &rate}); err != nil {
		t.Fatal(err)
	}
	if xs, err := leases.Claim(f.Ctx, f.Pool, ffdtype.ClaimParams{Lane: "tenants", Worker: "w/1", Max: 10}); err != nil || len(xs) != 2 {
		t.Fatalf("claim: %d %v; want one of acme (its limit) and zeta", len(xs), err)
	}
	_, body := get(t, base+"/lanes")
	if !regexp.MustCompile(`<td>tenants</td>.*<td>10/1h0m0s burst 10</td><td>8\.\d</td><td><a href="/lanes/tenants/keys">2</a></td><td>1</td><td>4</td>`).MatchString(body) {
		t.Errorf("lanes page: want tenants with its rate, 8 tokens left, 2 keys, 1 holding 4 back; got %s", body)
	}
	code, body := get(t, base+"/lanes/tenants/keys")
	if code != 200 || !regexp.MustCompile(`(?s)<tr data-key="acme"><td>acme</td><td>fair</td><td>1</td>.*<td>1</td><td>4</td><td>true</td>`).MatchString(body) ||
		strings.Contains(body, `data-key=""`) {
		t.Errorf("keys page: %d; want acme first, fair, limit 1, 1 running, 4 due, held, and no row for unkeyed work (there is none); got %s", code, body)
	}
	if code, _ := get(t, base+"/lanes/bad%20lane/keys"); code != http.StatusBadRequest {
		t.Errorf("keys of a bad lane name: %d, want 400", code)
	}
}

// The console listens only while a flow page is open: opening one
// opens its single LISTEN connection, closing the last closes it.
func TestConsoleListensOnlyWhileWatched(t *testing.T) {
	t.Parallel()
	f, base, sub := setup(t)
	listeners := func() int {
		return f.Count(`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1`, console.ApplicationName)
	}
	if n := listeners(); n != 0 {
		t.Fatalf("%d console listeners with no page open, want 0", n)
	}
	ctx, cancel := context.WithCancel(f.Ctx)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/flows/"+sub.Flow.ID.String()+"/live", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	first := make([]byte, 256)
	n, _ := resp.Body.Read(first)
	if !strings.Contains(string(first[:n]), "event: states") {
		t.Fatalf("the stream began with %q; want the flow's states", first[:n])
	}
	f.WaitFor("one listener while a page watches", func() bool { return listeners() == 1 })
	cancel()
	resp.Body.Close()
	f.WaitFor("no listener once the page is gone", func() bool { return listeners() == 0 })
}

// A flow's page shows the steps added at run time (dashed, naming their
// spawner), what a waiting step waits for, and the signals sent; an
// execution's page shows its wait and its signals.
func TestConsoleShowsWaitsSignalsAndSpawns(t *testing.T) {
	t.Parallel()
	f, base, sub := setup(t)
	xs, err := leases.Claim(f.Ctx, f.Pool, ffdtype.ClaimParams{Lane: "console", Worker: "w/1", Max: 1})
	if err != nil || len(xs) != 1 {
		t.Fatalf("claim: %v %v", xs, err)
	}
	gather := xs[0]
	spawn := ffdtype.SpawnParams{Nodes: []ffdtype.SubmitNode{{Ref: "approve", Params: ffdtype.CreateParams{Lane: "console.approve"}}},
		Edges: []ffdtype.SubmitEdge{{From: "approve", To: "render"}}}
	if _, _, err := flows.CompleteAndSpawn(f.Ctx, f.Pool, leases.Limits{}, gather.ID, gather.LeaseEpoch, nil, spawn); err != nil {
		t.Fatal(err)
	}
	ap, err := leases.Claim(f.Ctx, f.Pool, ffdtype.ClaimParams{Lane: "console.approve", Worker: "w/1", Max: 1})
	if err != nil || len(ap) != 1 {
		t.Fatalf("claim approve: %v %v", ap, err)
	}
	if _, err := leases.Suspend(f.Ctx, f.Pool, ap[0].ID, ap[0].LeaseEpoch, ffdtype.SuspendParams{Signal: "approved"}); err != nil {
		t.Fatal(err)
	}
	if _, err := leases.Signal(f.Ctx, f.Pool, leases.Limits{}, ffdtype.SignalParams{FlowID: &sub.Flow.ID, Name: "audit", Payload: []byte(`{"by":"ops"}`)}); err != nil {
		t.Fatal(err)
	}
	_, body := get(t, base+"/flows/"+sub.Flow.ID.String())
	for _, want := range []string{`data-step="approve" data-state="pending" data-spawned-by="gather" data-waiting="1"`, "added at run time by gather",
		`class="node st-pending spawned waiting"`, `class="edge spawn" data-from="gather" data-to="approve"`,
		`<span class="state st-waiting">waiting</span>`, `<div class="graph"><svg`,
		"waits for approved", `id="signals"`, "<td>audit</td>", "kept for a wait to come"} {
		if !strings.Contains(body, want) {
			t.Errorf("flow page lacks %q:\n%s", want, body)
		}
	}
	if _, body := get(t, base+"/executions/"+ap[0].ID.UUID.String()); !strings.Contains(body, `<td colspan="5" id="wait">waits for approved</td>`) {
		t.Errorf("execution page lacks its wait:\n%s", body)
	}
	// As drawn: every line of every node inside its box, the spawned
	// step right of its spawner.
	ctx := browser(t)
	navigate(t, ctx, base+"/flows/"+sub.Flow.ID.String())
	screenshot(t, ctx, "console-spawn-wait.png")
	drawn := run(t, ctx, chromedp.Evaluate[string](`(() => {
		const box = s => document.querySelector('g.node[data-step="' + s + '"] rect').getBBox();
		for (const g of document.querySelectorAll("g.node")) {
			const r = g.querySelector("rect").getBBox();
			for (const t of g.querySelectorAll("text")) {
				const b = t.getBBox();
				if (b.x + b.width > r.x + r.width) return g.dataset.step + ": " + t.textContent + " overflows its box";
			}
		}
		return box("approve").x > box("gather").x ? "ok" : "approve is not right of gather";
	})()`))
	if drawn != "ok" {
		t.Errorf("flow page as drawn: %s", drawn)
	}
	if _, err := leases.Signal(f.Ctx, f.Pool, leases.Limits{}, ffdtype.SignalParams{Execution: &ap[0].ID, Name: "approved"}); err != nil {
		t.Fatal(err)
	}
	if _, body := get(t, base+"/executions/"+ap[0].ID.UUID.String()); !strings.Contains(body, "woken by signal approved after attempt 1") || !strings.Contains(body, `id="signals"`) {
		t.Errorf("execution page lacks what woke it and its signal:\n%s", body)
	}
}

// A sub-flow step's box opens its child's graph once started; the
// child's page links back to its step; a flow's page names its version
// and its compensation.
func TestConsoleFollowsSubflowsAndCompensations(t *testing.T) {
	t.Parallel()
	f, base, _ := setup(t)
	if err := store.AnnounceVersions(f.Ctx, f.Pool, "default", []string{"v3"}); err != nil {
		t.Fatal(err)
	}
	sub, err := flows.Submit(f.Ctx, f.Pool, leases.Limits{}, ffdtype.SubmitFlowParams{
		Flow: ffdtype.CreateFlowParams{Kind: "order", Version: "v3"},
		Nodes: []ffdtype.SubmitNode{
			{Ref: "charge", Params: ffdtype.CreateParams{Lane: "console"}, Compensate: &ffdtype.CreateParams{Lane: "console"}},
			{Ref: "ship", Flow: &ffdtype.SubmitFlowParams{Nodes: []ffdtype.SubmitNode{{Ref: "pick", Params: ffdtype.CreateParams{Lane: "console"}}}}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	step := sub.Executions["ship"].ID
	_, body := get(t, base+"/flows/"+sub.Flow.ID.String())
	for _, want := range []string{`class="node st-pending subflow"`, `data-id="` + step.String() + `" data-step="ship"`, "sub-flow: starts when the step may run",
		"version v3", "compensation armed"} {
		if !strings.Contains(body, want) {
			t.Errorf("flow page before the child starts lacks %q:\n%s", want, body)
		}
	}
	child, err := flows.StartSubflow(f.Ctx, f.Pool, leases.Limits{}, step)
	if err != nil || child == nil {
		t.Fatalf("start the sub-flow: %v, %v", child, err)
	}
	_, body = get(t, base+"/flows/"+sub.Flow.ID.String())
	for _, want := range []string{`<a href="/flows/` + child.String() + `">`, `data-child="` + child.String() + `"`, "sub-flow " + child.String() + ": click to open its graph"} {
		if !strings.Contains(body, want) {
			t.Errorf("flow page of a started sub-flow lacks %q:\n%s", want, body)
		}
	}
	if _, body := get(t, base+"/flows/"+child.String()); !strings.Contains(body, `id="parent">sub-flow of step <a href="/executions/`+step.UUID.String()+`">`) {
		t.Errorf("the child's page does not link back to its step:\n%s", body)
	}
	if _, body := get(t, base+"/executions/"+step.UUID.String()); !strings.Contains(body, `<td>v3</td>`) || !strings.Contains(body, `id="child"><a href="/flows/`+child.String()+`">`) {
		t.Errorf("the step's page lacks its version and its child:\n%s", body)
	}
}
