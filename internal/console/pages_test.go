package console_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/cascade"
	"github.com/flowfabric/ffd/internal/console"
	"github.com/flowfabric/ffd/internal/flows"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/store"
	"github.com/flowfabric/ffd/internal/testdb"
)

// noRedirect answers a redirect as it is.
var noRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// post sends a form with no cookies; it returns the status and body.
func post(t *testing.T, base, path string, form url.Values, header http.Header) (int, string) {
	t.Helper()
	return send(t, &http.Client{CheckRedirect: noRedirect}, base+path, form, header)
}

func send(t *testing.T, c *http.Client, u string, form url.Values, header http.Header) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// session is a browser-like client: a cookie jar and the form token the
// console gave it.
type session struct {
	t    *testing.T
	base string
	c    *http.Client
	csrf string
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// newSession loads a page, keeping the session cookie and form token.
func newSession(t *testing.T, base string) *session {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	s := &session{t: t, base: base, c: &http.Client{Jar: jar, CheckRedirect: noRedirect}}
	// /login has a form when the console has a token; /lanes has one per
	// lane when it can act.
	for _, page := range []string{"/login", "/lanes"} {
		req, _ := http.NewRequest(http.MethodGet, base+page, nil)
		req.SetBasicAuth("ops", "pw")
		resp, err := s.c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if m := csrfField.FindStringSubmatch(string(b)); m != nil {
			s.csrf = m[1]
			return s
		}
	}
	t.Fatal("no form token on /login or /lanes")
	return nil
}

func (s *session) post(path string, form url.Values, header http.Header) (int, string) {
	s.t.Helper()
	form.Set("csrf", s.csrf)
	return send(s.t, s.c, s.base+path, form, header)
}

// serveLogged serves a console with auth whose log the test reads.
func serveLogged(t *testing.T, f *testdb.Fixture, auth console.Auth) (string, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	con, err := console.New(console.Config{Pool: f.Pool, Auth: auth, Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest(t, con)
	return srv, logs
}

// Bad ids answer 400, unknown objects 404 with a readable reason,
// actions the state forbids 409 with the reason; a 1 MiB id gives a
// short answer and a short log line; every answer carries the security
// headers.
func TestConsoleErrors(t *testing.T) {
	t.Parallel()
	f, _, sub := setup(t)
	base, logs := serveLogged(t, f, console.Auth{Token: "s3cret"})
	huge := strings.Repeat("x", 1<<20)
	for _, tc := range []struct {
		path string
		code int
		body string
	}{
		{"/executions/not-an-id", 400, "invalid execution id"},
		{"/executions/" + huge, 400, "invalid execution id"},
		{"/flows/not-an-id", 400, "invalid flow id"},
		{"/flows/" + huge, 400, "invalid flow id"},
		{"/flows/not-an-id/live", 400, "invalid flow id"},
		{"/flows?after=" + huge, 400, "invalid after"},
		{"/executions?after=nope", 400, "invalid after"},
		{"/executions?state=dozing", 400, "invalid state"},
		{"/flows/0190a1a2-0000-7000-8000-000000000000", 404, "flow 0190a1a2-0000-7000-8000-000000000000 not found"},
		{"/executions/0190a1a2-0000-7000-8000-000000000000", 404, "execution 0190a1a2-0000-7000-8000-000000000000 not found"},
		{"/executions?q=0190a1a2-0000-7000-8000-000000000000", 404, "not found"},
	} {
		code, body, h := getH(t, base+tc.path)
		short := tc.path
		if len(short) > 60 {
			short = short[:60] + "…"
		}
		if code != tc.code || !strings.Contains(body, tc.body) {
			t.Errorf("GET %s: %d %.200q; want %d with %q", short, code, body, tc.code, tc.body)
		}
		if len(body) > 400 {
			t.Errorf("GET %s: a %d-byte answer; an error must stay short", short, len(body))
		}
		if strings.Contains(body, "no rows in result set") {
			t.Errorf("GET %s: the answer leaks a driver error: %q", short, body)
		}
		if h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Referrer-Policy") != "same-origin" || h.Get("Content-Security-Policy") == "" {
			t.Errorf("GET %s: security headers %v", short, h)
		}
	}
	for _, e := range logs.All() {
		var n int
		for _, fld := range e.Context {
			n += len(fld.String) + len(fld.Key)
		}
		n += len(e.Message)
		if n > 1000 {
			t.Errorf("a %d-byte log entry %q at %s: a request must not make a log line long", n, e.Message, e.Level)
		}
		if e.Level > zapcore.DebugLevel {
			t.Errorf("a bad request logged at %s (%q); client errors log at debug", e.Level, e.Message)
		}
	}

	// A 200 page carries the headers too.
	if code, _, h := getH(t, base+"/flows"); code != 200 || h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Referrer-Policy") != "same-origin" {
		t.Errorf("/flows: %d, headers %v", code, h)
	}

	// Actions: a bad id is 400; rerunning an open flow and cancelling a
	// finished execution are 409 with the reason.
	s := newSession(t, base)
	auth := http.Header{"Authorization": {"Bearer s3cret"}}
	if code, body := s.post("/actions/flows/"+huge+"/cancel", url.Values{}, auth); code != 400 || len(body) > 400 {
		t.Errorf("cancel of a 1 MiB flow id: %d (%d bytes), want a short 400", code, len(body))
	}
	code, body := s.post("/actions/flows/"+sub.Flow.ID.String()+"/rerun", url.Values{}, auth)
	if code != http.StatusConflict || !strings.Contains(body, "still open") {
		t.Errorf("rerun of an open flow: %d %q; want 409 saying it is still open", code, body)
	}
	xs, err := leases.Claim(f.Ctx, f.Pool, ffdtype.ClaimParams{Lane: "console", Worker: "w/1", Max: 1})
	if err != nil || len(xs) != 1 {
		t.Fatalf("claim: %v %v", xs, err)
	}
	if _, err := leases.Complete(f.Ctx, f.Pool, leases.Limits{}, xs[0].ID, xs[0].LeaseEpoch, nil); err != nil {
		t.Fatal(err)
	}
	code, body = s.post("/actions/executions/"+xs[0].ID.UUID.String()+"/cancel", url.Values{}, auth)
	if code != http.StatusConflict || !strings.Contains(body, "completed") {
		t.Errorf("cancel of a completed execution: %d %q; want 409 naming its state", code, body)
	}
}

func getH(t *testing.T, u string) (int, string, http.Header) {
	t.Helper()
	resp, err := (&http.Client{CheckRedirect: noRedirect}).Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// Each browser gets its own form token, bound to its session cookie: one
// browser's token does not work with another's cookie, nor without one.
// Basic authentication, which a browser sends by itself, needs it.
func TestConsoleFormTokenIsPerBrowser(t *testing.T) {
	t.Parallel()
	f, _, sub := setup(t)
	base, _ := serveLogged(t, f, console.Auth{User: "ops", Password: "pw"})
	a, b := newSession(t, base), newSession(t, base)
	if a.csrf == b.csrf {
		t.Fatalf("two browsers got the same form token %q", a.csrf)
	}
	basic := &http.Request{Header: http.Header{}}
	basic.SetBasicAuth("ops", "pw")
	auth := basic.Header
	path := "/actions/executions/" + sub.Executions["render"].ID.UUID.String() + "/cancel"
	b.csrf = a.csrf
	if code, _ := b.post(path, url.Values{}, auth); code != http.StatusForbidden {
		t.Fatalf("browser B posting browser A's token: %d, want 403", code)
	}
	if code, _ := post(t, base, path, url.Values{"csrf": {a.csrf}}, auth); code != http.StatusForbidden {
		t.Fatalf("A's token without A's cookie: %d, want 403", code)
	}
	a2 := newSession(t, base)
	if code, _ := a2.post(path, url.Values{}, auth); code != http.StatusSeeOther {
		t.Fatalf("a browser's own token: %d, want 303", code)
	}
}

// dag20 is a 20-step DAG with fan-out, joins and edges that skip
// columns (billing → finalize skips three).
var dag20 = []struct {
	step string
	ups  []string
}{
	{"ingest", nil},
	{"validate", []string{"ingest"}}, {"enrich", []string{"ingest"}}, {"billing", []string{"ingest"}},
	{"fetch-a", []string{"ingest"}}, {"fetch-b", []string{"ingest"}},
	{"geo", []string{"enrich"}}, {"score", []string{"validate", "enrich"}}, {"cdn-publish", []string{"enrich"}},
	{"tax", []string{"billing"}}, {"thumbs", []string{"fetch-a"}}, {"index", []string{"fetch-b"}},
	{"merge", []string{"geo", "score"}}, {"render", []string{"cdn-publish"}}, {"search", []string{"index", "validate"}},
	{"report", []string{"merge", "render"}}, {"audit", []string{"tax", "billing"}}, {"sitemap", []string{"search", "thumbs"}},
	{"publish", []string{"sitemap", "cdn-publish"}},
	{"finalize", []string{"report", "audit", "billing", "publish"}},
}

func submitDAG20(t *testing.T, f *testdb.Fixture) *ffdtype.SubmittedFlow {
	t.Helper()
	p := ffdtype.SubmitFlowParams{Flow: ffdtype.CreateFlowParams{Kind: "release"}}
	for _, n := range dag20 {
		p.Nodes = append(p.Nodes, ffdtype.SubmitNode{Ref: n.step, Params: ffdtype.CreateParams{Lane: "dag-" + n.step, Kind: n.step}})
		for _, u := range n.ups {
			p.Edges = append(p.Edges, ffdtype.SubmitEdge{From: u, To: n.step})
		}
	}
	sub, err := flows.Submit(f.Ctx, f.Pool, leases.Limits{}, p)
	if err != nil {
		t.Fatal(err)
	}
	return sub
}

// runStep dispatches what earlier steps' ends decided (as the daemon
// would), then claims the named step (it must be pending) and completes
// it, or fails it for good.
func runStep(t *testing.T, f *testdb.Fixture, sub *ffdtype.SubmittedFlow, step string, fail string) {
	t.Helper()
	d := cascade.New(f.Pool, nil)
	for {
		r, err := d.DispatchBatch(f.Ctx, 100, 0)
		if err != nil {
			t.Fatal(err)
		}
		if r.Events == 0 {
			break
		}
	}
	xs, err := leases.Claim(f.Ctx, f.Pool, ffdtype.ClaimParams{Lane: "dag-" + step, Worker: "w/1", Max: 1})
	if err != nil || len(xs) != 1 || xs[0].ID != sub.Executions[step].ID {
		t.Fatalf("claim step %s: %v, %v", step, xs, err)
	}
	if fail != "" {
		_, err = leases.Fail(f.Ctx, f.Pool, xs[0].ID, xs[0].LeaseEpoch, ffdtype.FailParams{Error: fail})
	} else {
		_, err = leases.Complete(f.Ctx, f.Pool, leases.Limits{}, xs[0].ID, xs[0].LeaseEpoch, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// textAt opens path and returns the text of the element sel.
func textAt(t *testing.T, ctx context.Context, url, sel string) string {
	t.Helper()
	navigate(t, ctx, url)
	return run(t, ctx, chromedp.Text(chromedp.CSS(sel)))
}

// waitJS waits until expr is true in the page, failing after 20 s.
func waitJS(t *testing.T, ctx context.Context, expr string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr)); err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the page never had %s", expr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// screenshot saves the page to $FFD_CONSOLE_SCREENSHOTS/name when that
// is set (docs/console.md's images are taken this way).
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("FFD_CONSOLE_SCREENSHOTS")
	if dir == "" {
		return
	}
	png := run(t, ctx, chromedp.FullScreenshot(100))
	if !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Fatalf("screenshot %s is not a PNG", name)
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// crossingsJS lists every edge that passes through a step's box other
// than its own ends, sampling each drawn path every 2 units.
const crossingsJS = `(() => {
  const boxes = [...document.querySelectorAll("g.node")].map(g => {
    const r = g.querySelector("rect");
    return {step: g.dataset.step, x: +r.getAttribute("x"), y: +r.getAttribute("y"), w: +r.getAttribute("width"), h: +r.getAttribute("height")};
  });
  const bad = new Set();
  for (const p of document.querySelectorAll("path.edge")) {
    const len = p.getTotalLength();
    for (let s = 0; s <= len; s += 2) {
      const pt = p.getPointAtLength(s);
      for (const b of boxes) {
        if (pt.x > b.x + 1 && pt.x < b.x + b.w - 1 && pt.y > b.y + 1 && pt.y < b.y + b.h - 1) {
          bad.add(p.dataset.from + " -> " + p.dataset.to + " through " + b.step);
        }
      }
    }
  }
  return [...bad];
})()`

// The DAG view of a 20-step flow in Chromium: every edge ends in an
// arrowhead and none passes through a step's box (billing → finalize
// skips three columns); each node says its state in words with a
// duration; a legend names the colours; a failed step's error is on the
// page while the flow is still open; times show milliseconds.
func TestConsoleDAGView(t *testing.T) {
	t.Parallel()
	f := testdb.Checked(t, 3*time.Minute)
	sub := submitDAG20(t, f)
	runStep(t, f, sub, "ingest", "")
	runStep(t, f, sub, "billing", "card declined: insufficient funds")
	con, err := console.New(console.Config{Pool: f.Pool})
	if err != nil {
		t.Fatal(err)
	}
	base := httptest(t, con)
	ctx := browser(t)
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1800, 900)); err != nil {
		t.Fatal(err)
	}
	navigate(t, ctx, base+"/flows/"+sub.Flow.ID.String())

	if n := run(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll("g.node").length`)); n != 20 {
		t.Fatalf("%d nodes drawn, want 20", n)
	}
	edges := 0
	for _, n := range dag20 {
		edges += len(n.ups)
	}
	withArrow := run(t, ctx, chromedp.Evaluate[int](`[...document.querySelectorAll("path.edge")].filter(p => /^url\(#arrow(-resolved)?\)$/.test(p.getAttribute("marker-end")) && document.querySelector(p.getAttribute("marker-end").slice(4, -1))).length`))
	if withArrow != edges {
		t.Fatalf("%d of %d edges end in an arrowhead", withArrow, edges)
	}
	if bad := run(t, ctx, chromedp.Evaluate[[]string](crossingsJS)); len(bad) != 0 {
		t.Fatalf("edges drawn through step boxes: %v", bad)
	}
	status := func(step string) string {
		return run(t, ctx, chromedp.Evaluate[string](fmt.Sprintf(`document.querySelector('g.node[data-step="%s"] text.status').textContent`, step)))
	}
	if s := status("ingest"); !regexp.MustCompile(`^completed · \d+ ms$`).MatchString(s) {
		t.Errorf("ingest's status %q; want \"completed · N ms\"", s)
	}
	if s := status("billing"); !strings.HasPrefix(s, "failed · ") {
		t.Errorf("billing's status %q; want failed with a duration", s)
	}
	if s := status("finalize"); s != "skipped" && s != "blocked" {
		t.Errorf("finalize's status %q; want it in words", s)
	}
	legend := run(t, ctx, chromedp.Text(chromedp.CSS("#legend")))
	for _, st := range ffdtype.States {
		if !strings.Contains(legend, string(st)) {
			t.Errorf("the legend %q does not name %s", legend, st)
		}
	}
	failed := run(t, ctx, chromedp.Text(chromedp.CSS("#failed-steps")))
	if !strings.Contains(failed, "billing") || !strings.Contains(failed, "card declined: insufficient funds") {
		t.Errorf("failed steps %q; want billing with its error", failed)
	}
	if fs := run(t, ctx, chromedp.Text(chromedp.CSS("#flow-state"))); fs != "open" {
		t.Errorf("the flow is %q, want still open", fs)
	}
	if meta := run(t, ctx, chromedp.Text(chromedp.CSS("main p.muted"))); !regexp.MustCompile(`created \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC`).MatchString(meta) {
		t.Errorf("the flow's creation time %q is not to the millisecond", meta)
	}
	screenshot(t, ctx, "console-dag20.png")
}

// The pages an operator expects: flows newest first with progress, a
// failed step and a duration; executions with search and filters (an id
// goes to its page); schedules; downstreams by step name; an empty
// consumers page that says how to make one.
func TestConsoleOperatorPages(t *testing.T) {
	t.Parallel()
	f, base, older := setup(t)
	newer := submitDAG20(t, f)
	runStep(t, f, newer, "ingest", "")
	runStep(t, f, newer, "billing", "card declined")

	_, body := get(t, base+"/flows")
	iNew, iOld := strings.Index(body, newer.Flow.ID.String()), strings.Index(body, older.Flow.ID.String())
	if iNew < 0 || iOld < 0 || iNew > iOld {
		t.Fatalf("flows list: want the newer flow first (at %d, older at %d)", iNew, iOld)
	}
	row := regexp.MustCompile(`(?s)<tr data-flow="` + newer.Flow.ID.String() + `">.*?</tr>`).FindString(body)
	if !strings.Contains(row, "2/20") || !strings.Contains(row, "billing") || !strings.Contains(row, "so far") {
		t.Errorf("the newer flow's row %q; want progress 2/20, the failed step billing and a running duration", row)
	}

	ctx := browser(t)
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1400, 700)); err != nil {
		t.Fatal(err)
	}
	navigate(t, ctx, base+"/executions")
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS(`#exec-filters input[name=q]`), "fetch-"),
		chromedp.Submit(chromedp.CSS(`#exec-filters`)),
	); err != nil {
		t.Fatal(err)
	}
	// The old page has a table too: wait for the new one to load.
	waitJS(t, ctx, `location.search.includes("q=fetch-") && document.readyState === "complete" && !!document.querySelector("#executions")`)
	list := run(t, ctx, chromedp.Text(chromedp.CSS("#executions")))
	if !strings.Contains(list, "fetch-a") || !strings.Contains(list, "fetch-b") || strings.Contains(list, "gather") || strings.Contains(list, "ingest") {
		t.Errorf("search fetch-: %q; want fetch-a and fetch-b only", list)
	}
	for q, want := range map[string][]string{
		"state=failed":          {"card declined"},
		"state=completed":       {"ingest"},
		"lane=console":          {"gather", "render"},
		"kind=tax&state=failed": nil,
	} {
		_, body := get(t, base+"/executions?"+q)
		if want == nil {
			if !strings.Contains(body, `id="empty"`) {
				t.Errorf("/executions?%s: want the empty state", q)
			}
			continue
		}
		for _, w := range want {
			if !strings.Contains(body, w) {
				t.Errorf("/executions?%s lacks %q", q, w)
			}
		}
	}
	score := newer.Executions["score"].ID.UUID.String()
	navigate(t, ctx, base+"/executions?q="+score)
	if loc := run(t, ctx, chromedp.Evaluate[string](`location.pathname`)); loc != "/executions/"+score {
		t.Errorf("searching an execution id went to %s", loc)
	}
	navigate(t, ctx, base+"/executions?q="+newer.Flow.ID.String())
	if loc := run(t, ctx, chromedp.Evaluate[string](`location.pathname`)); loc != "/flows/"+newer.Flow.ID.String() {
		t.Errorf("searching a flow id went to %s", loc)
	}
	downs := textAt(t, ctx, base+"/executions/"+newer.Executions["enrich"].ID.UUID.String(), "#downstreams")
	for _, d := range []string{"cdn-publish", "geo", "score"} {
		if !strings.Contains(downs, d) {
			t.Errorf("enrich's downstreams %q lack %s by name", downs, d)
		}
	}

	if empty := textAt(t, ctx, base+"/schedules", "#empty"); !strings.Contains(empty, "ffd schedule create") {
		t.Errorf("an empty schedules page says %q", empty)
	}
	if _, err := store.InsertSchedule(f.Ctx, f.Pool, store.ScheduleRow{Schedule: ffdtype.Schedule{Name: "nightly", Namespace: "default", Cron: "0 3 * * *", Timezone: "UTC",
		Target: "execution", Missed: "latest", NextRunAt: time.Now().Add(time.Hour)}, Params: []byte(`{"v":1,"execution":{"lane":"dag","kind":"report"}}`)}); err != nil {
		t.Fatal(err)
	}
	if s := textAt(t, ctx, base+"/schedules", "#schedules"); !strings.Contains(s, "nightly") || !strings.Contains(s, "0 3 * * *") {
		t.Errorf("schedules page %q; want nightly", s)
	}
	if hint := textAt(t, ctx, base+"/consumers", "#consumers-empty"); !strings.Contains(hint, "ffd events tail --consumer") {
		t.Errorf("an empty consumers page says %q; want how to start one", hint)
	}
	screenshot(t, ctx, "console-consumers-empty.png")
	navigate(t, ctx, base+"/flows")
	screenshot(t, ctx, "console-flows.png")
	navigate(t, ctx, base+"/executions")
	screenshot(t, ctx, "console-executions.png")
}

// An action runs only on a form it read whole and on choices it was
// given: a body over the bound is 413, a cancel naming no policy or an
// unknown one is 400, and none of them cancels anything (a body of
// 10 MiB once hid its policy and was taken for cancel_all).
func TestConsoleActionsRefuseWhatTheyCannotRead(t *testing.T) {
	t.Parallel()
	f, _, sub := setup(t)
	base := serve(t, f, console.Auth{Token: "s3cret"})
	auth := http.Header{"Authorization": {"Bearer s3cret"}}
	cancel := "/actions/flows/" + sub.Flow.ID.String() + "/cancel"
	pad := strings.Repeat("x", 10<<20)
	for _, tc := range []struct {
		name string
		form url.Values
		code int
		body string
	}{
		{"a 10 MiB body", url.Values{"policy": {"flow_only"}, "pad": {pad}}, http.StatusRequestEntityTooLarge, "nothing was done"},
		{"a body just over the bound", url.Values{"policy": {"cancel_all"}, "pad": {strings.Repeat("x", 64<<10)}}, http.StatusRequestEntityTooLarge, "nothing was done"},
		{"no policy", url.Values{}, http.StatusBadRequest, "policy"},
		{"an empty policy", url.Values{"policy": {""}}, http.StatusBadRequest, "policy"},
		{"an unknown policy", url.Values{"policy": {"everything"}}, http.StatusBadRequest, "want flow_only, cancel_all or cancel_pending"},
	} {
		code, body := post(t, base, cancel, tc.form, auth)
		if code != tc.code || !strings.Contains(body, tc.body) {
			t.Errorf("%s: %d %.200q; want %d with %q", tc.name, code, body, tc.code, tc.body)
		}
		if n := f.Count(`SELECT count(*) FROM ff_execution WHERE flow_id = $1 AND state = 'cancelled'`, sub.Flow.ID); n != 0 {
			t.Fatalf("%s: %d members cancelled; want none", tc.name, n)
		}
		if n := f.Count(`SELECT count(*) FROM ff_flow WHERE flow_id = $1 AND state = 'open'`, sub.Flow.ID); n != 1 {
			t.Fatalf("%s: the flow is no longer open", tc.name)
		}
	}
	// A malformed body is 400 too, and so is one over the bound on the
	// sign-in form.
	req, _ := http.NewRequest(http.MethodPost, base+cancel, strings.NewReader("policy=%zz"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := (&http.Client{CheckRedirect: noRedirect}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a malformed form: %d, want 400", resp.StatusCode)
	}
	if code, _ := post(t, base, "/login", url.Values{"token": {"s3cret"}, "pad": {pad}}, nil); code != http.StatusRequestEntityTooLarge {
		t.Errorf("a 10 MiB sign-in: %d, want 413", code)
	}
	// The least destructive policy, named, does what it says.
	if code, body := post(t, base, cancel, url.Values{"policy": {"flow_only"}}, auth); code != http.StatusSeeOther {
		t.Fatalf("flow_only: %d %.200q, want 303", code, body)
	}
	if n := f.Count(`SELECT count(*) FROM ff_execution WHERE flow_id = $1 AND state = 'cancelled'`, sub.Flow.ID); n != 0 {
		t.Fatalf("flow_only cancelled %d members; want none", n)
	}
}
