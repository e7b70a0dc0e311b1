package console

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/fault"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/store"
)

//go:embed assets
var assets embed.FS

// pageSize is the flows list's page.
const pageSize = 50

// Config configures a console.
type Config struct {
	// Pool reads the database. Required.
	Pool *pgxpool.Pool
	// Logger. Default: none.
	Logger *zap.Logger
	// Auth enables actions. Default: none, a read-only console.
	Auth Auth
}

// Console is the web console's handler.
type Console struct {
	pool *pgxpool.Pool
	log  *zap.Logger
	hub  *hub
	tmpl *template.Template
	mux  *http.ServeMux
	auth Auth
	keys keys
}

// New builds a console over cfg.Pool.
func New(cfg Config) (*Console, error) {
	if cfg.Pool == nil {
		return nil, errors.New("console: a pool is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	tmpl, err := template.New("pages").Funcs(template.FuncMap{
		"ts": func(t time.Time) string { return t.UTC().Format(stamp) },
		"tsp": func(t *time.Time) string {
			if t == nil {
				return ""
			}
			return t.UTC().Format(stamp)
		},
		"flowDur": func(f *ffdtype.Flow) string {
			if f.TerminalAt != nil {
				return duration(f.TerminalAt.Sub(f.CreatedAt))
			}
			return duration(time.Since(f.CreatedAt)) + " so far"
		},
		"add":       func(a, b int) int { return a + b },
		"fitName":   func(s string) string { return fitLabel(nameChars, s) },
		"fitStatus": func(s string) string { return fitLabel(statusChars, s) },
		"fitJoin":   func(s string) string { return fitLabel(joinChars, s) },
		"deref64":   func(f *float64) float64 { return *f },
		"when": func(t *time.Time) string {
			if t == nil {
				return ""
			}
			return t.UTC().Format(time.RFC3339)
		},
	}).ParseFS(assets, "assets/pages.html")
	if err != nil {
		return nil, fmt.Errorf("console: parse pages: %w", err)
	}
	c := &Console{pool: cfg.Pool, log: cfg.Logger, hub: newHub(cfg.Pool.Config().ConnConfig, cfg.Logger), tmpl: tmpl,
		mux: http.NewServeMux(), auth: cfg.Auth, keys: newKeys()}
	c.routeActions()
	c.mux.Handle("GET /assets/", http.FileServerFS(assets))
	c.mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/flows", http.StatusFound) })
	c.mux.HandleFunc("GET /flows", c.flows)
	c.mux.HandleFunc("GET /flows/{id}", c.flow)
	c.mux.HandleFunc("GET /flows/{id}/live", c.live)
	c.mux.HandleFunc("GET /executions", c.executions)
	c.mux.HandleFunc("GET /executions/{id}", c.execution)
	c.mux.HandleFunc("GET /schedules", c.schedules)
	c.mux.HandleFunc("GET /lanes", c.lanes)
	c.mux.HandleFunc("GET /lanes/{lane}/keys", c.laneKeys)
	c.mux.HandleFunc("GET /consumers", c.consumers)
	c.mux.HandleFunc("GET /dead", c.dead)
	c.mux.HandleFunc("GET /triggers", c.triggers)
	return c, nil
}

// stamp is how pages show a time: UTC, to the millisecond.
const stamp = "2006-01-02 15:04:05.000"

// ServeHTTP serves the console, with the same security headers on every
// answer, errors included.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	// same-origin, not no-referrer: with no-referrer a browser sends
	// "Origin: null" on a form's POST, which the origin check refuses.
	h.Set("Referrer-Policy", "same-origin")
	c.mux.ServeHTTP(w, r)
}

// Close stops live updates.
func (c *Console) Close() { c.hub.close() }

// page is what every page template gets.
type page struct {
	Title string
	// ReadOnly: no authentication is configured, so no action is shown.
	ReadOnly bool
	// CanAct: actions are shown (authentication is configured and this
	// browser signed in, or basic authentication will ask).
	CanAct bool
	// SignIn: the console has a token and this browser has not signed in.
	SignIn   bool
	SignedIn bool
	CSRF     string // this browser's form token
	Path     string // the page's own path, to come back to after signing in
}

// page is the common part of a page titled title, for the browser of r.
func (c *Console) page(w http.ResponseWriter, r *http.Request, title string) page {
	p := page{Title: title, ReadOnly: !c.auth.enabled(), CSRF: c.csrfFor(c.session(w, r)), Path: r.URL.RequestURI()}
	p.SignedIn = c.signedIn(r)
	p.SignIn = c.auth.Token != "" && !p.SignedIn
	basic := c.auth.User != "" && c.auth.Password != ""
	p.CanAct = c.auth.enabled() && (p.SignedIn || basic || c.who(r) != "")
	return p
}

func (c *Console) render(w http.ResponseWriter, r *http.Request, name string, data any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := c.tmpl.ExecuteTemplate(w, name, data); err != nil {
		c.log.Warn("render console page", zap.String("page", name), zap.String("path", clip(r.URL.Path)), zap.Error(err))
	}
}

// fail answers an error: 404 for what does not exist, 400 for bad input,
// 409 for an action the object's state forbids, each with its reason;
// 500 for the rest, whose reason goes to the log only. Client errors log
// at Debug and every logged value is clipped: a request cannot make a
// log line long.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, err error) {
	var nf *ffdtype.NotFoundError
	var ve *ffdtype.ValidationError
	var ce *ffdtype.ConflictError
	var te *ffdtype.AlreadyTerminalError
	code := http.StatusInternalServerError
	switch {
	case errors.As(err, &nf):
		code = http.StatusNotFound
	case errors.As(err, &ve):
		code = http.StatusBadRequest
	case errors.As(err, &ce), errors.As(err, &te), errors.Is(err, ffdtype.ErrStaleRevision):
		code = http.StatusConflict
	}
	if code == http.StatusInternalServerError {
		// Whole, up to a bound: the reason is the operator's only clue, and
		// what a request sent reaches it only validated (ids parse first).
		c.log.Error("console request failed", zap.String("method", r.Method), zap.String("path", clip(r.URL.Path)),
			zap.String("error", clipTo(err.Error(), maxLoggedReason)))
		http.Error(w, "internal error (the console's log has the reason)", code)
		return
	}
	c.log.Debug("console request refused", zap.String("method", r.Method), zap.String("path", clip(r.URL.Path)),
		zap.Int("status", code), zap.String("error", clip(err.Error())))
	http.Error(w, clip(err.Error()), code)
}

// How much of a request's values (maxEchoed) and of a failure's reason
// (maxLoggedReason) is logged or echoed, in bytes.
const (
	maxEchoed       = 200
	maxLoggedReason = 4096
)

// clip shortens what a request sent before it is logged or echoed.
func clip(s string) string { return clipTo(s, maxEchoed) }

// clipTo cuts s to at most most bytes (whole characters), saying how long
// it was.
func clipTo(s string, most int) string {
	if len(s) <= most {
		return s
	}
	return strings.ToValidUTF8(s[:most], "") + fmt.Sprintf("… (%d bytes)", len(s))
}

// notFound turns a read that found no row into a NotFoundError naming
// what was looked for.
func notFound(object, id string, err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return &ffdtype.NotFoundError{Object: object, ID: id}
	}
	return err
}

type stateCount struct {
	State ffdtype.FlowState
	N     int
}

// flowRow is a flow on the list, with its progress.
type flowRow struct {
	*ffdtype.Flow
	Progress store.FlowProgress
}

func (c *Console) flows(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := store.FlowFilter{Namespace: q.Get("namespace"), State: ffdtype.FlowState(q.Get("state")), Kind: q.Get("kind"), Limit: pageSize + 1, Newest: true}
	if err := parseRange(q, &f.From, &f.To); err != nil {
		c.fail(w, r, err)
		return
	}
	after, err := parseAfter(q)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	f.After = after
	ctx := r.Context()
	fs, err := store.ListFlows(ctx, c.pool, f)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	counts, err := store.FlowStateCounts(ctx, c.pool, f.Namespace)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	data := struct {
		page
		Flows  []flowRow
		Counts []stateCount
		States []ffdtype.FlowState
		Filter store.FlowFilter
		Next   string
	}{page: c.page(w, r, "Flows"), States: ffdtype.FlowStates, Filter: f}
	for _, s := range ffdtype.FlowStates {
		data.Counts = append(data.Counts, stateCount{s, counts[s]})
	}
	if len(fs) > pageSize {
		fs = fs[:pageSize]
		q.Set("after", fs[pageSize-1].ID.String())
		data.Next = "/flows?" + q.Encode()
	}
	ids := make([]uuid.UUID, len(fs))
	for i, fl := range fs {
		ids[i] = fl.ID
	}
	progress, err := store.FlowProgressOf(ctx, c.pool, ids)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	for _, fl := range fs {
		row := flowRow{Flow: fl}
		if p := progress[fl.ID]; p != nil {
			row.Progress = *p
		}
		data.Flows = append(data.Flows, row)
	}
	c.render(w, r, "flows", data)
}

// parseAfter reads a list's keyset cursor, the id its last page ended
// at (nil: the first page).
func parseAfter(q url.Values) (*uuid.UUID, error) {
	a := q.Get("after")
	if a == "" {
		return nil, nil
	}
	u, err := ffdtype.ParseUUID("after", a)
	if err != nil {
		return nil, err
	}
	return &u, nil
}

// parseRange reads the from and to filters: a date or an RFC 3339 time.
func parseRange(q url.Values, from, to **time.Time) error {
	for _, b := range []struct {
		name string
		to   **time.Time
	}{{"from", from}, {"to", to}} {
		if v := q.Get(b.name); v != "" {
			t, err := parseWhen(v)
			if err != nil {
				return fault.Invalid(ffdtype.KindInvalidValue, b.name, v, "want a date (2026-11-22) or a time (RFC 3339)")
			}
			*b.to = &t
		}
	}
	return nil
}

func (c *Console) flow(w http.ResponseWriter, r *http.Request) {
	id, err := ffdtype.ParseUUID("flow id", r.PathValue("id"))
	if err != nil {
		c.fail(w, r, err)
		return
	}
	ctx := r.Context()
	f, err := store.GetFlow(ctx, c.pool, id)
	if err != nil {
		c.fail(w, r, notFound("flow", id.String(), err))
		return
	}
	members, err := store.FlowMembers(ctx, c.pool, id)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	edges, err := store.FlowEdges(ctx, c.pool, id)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	groups, err := store.ListGroups(ctx, c.pool, id)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	notes, err := store.FlowMemberNotes(ctx, c.pool, id)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	signals, err := store.ListSignals(ctx, c.pool, f.Partition, id, maxSignalsShown)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	var failed []*ffdtype.Execution
	for _, x := range members {
		if x.State == ffdtype.StateFailed || x.State == ffdtype.StateExpired {
			failed = append(failed, x)
		}
	}
	c.render(w, r, "flow", struct {
		page
		Flow    *ffdtype.Flow
		Graph   *graph
		Failed  []*ffdtype.Execution
		Signals []signalRow
		States  []ffdtype.State
		// The actions this flow's state allows.
		CanCancel, CanRerun bool
	}{c.page(w, r, "Flow "+id.String()), f, layout(members, edges, groups, notes, time.Now()), failed,
		signalRows(signals, members), ffdtype.States,
		f.State == ffdtype.FlowOpen, f.State == ffdtype.FlowFailed || f.State == ffdtype.FlowCancelled})
}

// maxSignalsShown bounds the signals a flow's or an execution's page
// lists (the oldest first).
const maxSignalsShown = 100

// signalRow is a signal as a page lists it.
type signalRow struct {
	ffdtype.Signal
	To, TakenBy string // step names (or ids) of its target and of the step that took it
	Payload     string
}

// signalRows names each signal's target and taker among members.
func signalRows(ss []ffdtype.Signal, members []*ffdtype.Execution) []signalRow {
	names := map[uuid.UUID]string{}
	for _, x := range members {
		names[x.ID.UUID] = stepName(x)
	}
	name := func(id *ffdtype.ExecutionID) string {
		if id == nil {
			return ""
		}
		if n, ok := names[id.UUID]; ok {
			return n
		}
		return id.String()
	}
	out := make([]signalRow, len(ss))
	for i, s := range ss {
		out[i] = signalRow{Signal: s, To: name(s.Execution), TakenBy: name(s.ConsumedBy), Payload: clipTo(pretty(s.Payload), 200)}
		if out[i].To == "" {
			out[i].To = "the flow"
		}
	}
	return out
}

// live streams a flow's states as server-sent events: at once, then
// after every notification that changed them. A page that closes ends
// its stream; the last one to close stops the console's LISTEN.
func (c *Console) live(w http.ResponseWriter, r *http.Request) {
	id, err := ffdtype.ParseUUID("flow id", r.PathValue("id"))
	if err != nil {
		c.fail(w, r, err)
		return
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	wake, unsubscribe := c.hub.subscribe()
	defer unsubscribe()
	// The fallback when a notification is lost: a re-read every 30 s.
	fallback := time.NewTicker(30 * time.Second)
	defer fallback.Stop()
	last := ""
	for {
		msg, err := c.states(r.Context(), id)
		if err != nil {
			return
		}
		if msg != last {
			if _, err := fmt.Fprintf(w, "event: states\ndata: %s\n\n", msg); err != nil {
				return
			}
			flusher.Flush()
			last = msg
		}
		select {
		case <-r.Context().Done():
			return
		case <-wake:
		case <-fallback.C:
		}
	}
}

// stepState is one step in a live message: its state and its status
// line (the state in words, with a duration).
type stepState struct {
	State   string `json:"s"`
	Status  string `json:"t"` // as it fits its box
	Full    string `json:"f"` // whole, for the tooltip
	Waiting bool   `json:"w,omitempty"`
}

// states is the flow's and its steps' states as JSON. A running step's
// status carries no running time, so that the message changes only when
// a state does.
func (c *Console) states(ctx context.Context, id uuid.UUID) (string, error) {
	f, err := store.GetFlow(ctx, c.pool, id)
	if err != nil {
		return "", err
	}
	members, err := store.FlowMembers(ctx, c.pool, id)
	if err != nil {
		return "", err
	}
	notes, err := store.FlowMemberNotes(ctx, c.pool, id)
	if err != nil {
		return "", err
	}
	steps := make(map[string]stepState, len(members))
	for _, x := range members {
		st := stepState{State: string(x.State), Status: string(x.State)}
		if x.State != ffdtype.StateRunning {
			st.Status = statusWith(x, notes[x.ID.UUID], time.Now())
		}
		st.Waiting = notes[x.ID.UUID].Waiting
		st.Full, st.Status = st.Status, fitLabel(statusChars, st.Status)
		steps[x.ID.String()] = st
	}
	b, err := json.Marshal(map[string]any{"flow": f.State, "steps": steps})
	return string(b), err
}

func (c *Console) execution(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	x, err := c.findExecution(ctx, r.PathValue("id"))
	if err != nil {
		c.fail(w, r, err)
		return
	}
	attempts, err := store.ListAttempts(ctx, c.pool, x.ID)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	wake, err := store.ReadWake(ctx, c.pool, x.ID)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	signals, err := store.ListSignals(ctx, c.pool, x.ID.Partition, x.ID.UUID, maxSignalsShown)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	data := struct {
		page
		X               *ffdtype.Execution
		Wait            string
		Signals         []signalRow
		Attempts        []ffdtype.Attempt
		Upstreams       []ffdtype.Upstream
		Downstreams     []store.Downstream
		Payload, Result string
		// Child is a sub-flow step's child flow, once started.
		Child *uuid.UUID
		// The actions this execution's state allows: cancel while it
		// has not ended; rerun once it failed, expired or was cancelled,
		// outside a flow (a member reruns with its flow).
		CanCancel, CanRerun bool
	}{page: c.page(w, r, "Execution "+x.ID.String()), X: x, Attempts: attempts,
		Wait: describeWake(wake), Signals: signalRows(signals, []*ffdtype.Execution{x}),
		Payload: pretty(x.Payload), Result: pretty(x.Result),
		CanCancel: !x.State.Terminal(),
		CanRerun:  x.FlowID == nil && x.State.Terminal() && x.State != ffdtype.StateCompleted && x.State != ffdtype.StateSkipped}
	if x.Lane == store.SubflowLane {
		if sf, err := store.GetSubflow(ctx, c.pool, x.ID); err == nil {
			data.Child = sf.Child
		}
	}
	if x.FlowID != nil {
		if data.Upstreams, err = store.UpstreamsOf(ctx, c.pool, *x.FlowID, x.ID); err != nil {
			c.fail(w, r, err)
			return
		}
		if data.Downstreams, err = store.DownstreamsOf(ctx, c.pool, *x.FlowID, x.ID); err != nil {
			c.fail(w, r, err)
			return
		}
	}
	c.render(w, r, "execution", data)
}

// describeWake says what an execution waits for, or what ended its last
// wait; "" when it never waited.
func describeWake(w *ffdtype.Wake) string {
	switch {
	case w == nil:
		return ""
	case w.Waiting:
		return waitLabel(w.For, w.Signal, w.Until)
	case w.Received != nil:
		return "woken by signal " + w.Received.Name + " after attempt " + itoa(w.Attempt)
	}
	return w.For + " ended by its " + string(w.Reason) + " after attempt " + itoa(w.Attempt)
}

// executions lists executions, newest first, with filters, and a search
// box: an id found goes to its page; other text keeps the executions
// whose kind or step begins with it.
func (c *Console) executions(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	ctx := r.Context()
	search := strings.TrimSpace(q.Get("q"))
	if search != "" && isID(search) {
		if x, err := c.findExecution(ctx, search); err == nil {
			http.Redirect(w, r, "/executions/"+x.ID.UUID.String(), http.StatusFound)
			return
		}
		if u, err := ffdtype.ParseUUID("id", search); err == nil {
			if _, err := store.GetFlow(ctx, c.pool, u); err == nil {
				http.Redirect(w, r, "/flows/"+u.String(), http.StatusFound)
				return
			}
		}
		c.fail(w, r, &ffdtype.NotFoundError{Object: "execution or flow", ID: search})
		return
	}
	f := store.ExecutionFilter{Namespace: q.Get("namespace"), Lane: q.Get("lane"), State: ffdtype.State(q.Get("state")),
		Kind: q.Get("kind"), Search: search, Limit: pageSize + 1, Newest: true}
	if f.State != "" && !f.State.Valid() {
		c.fail(w, r, fault.Invalid(ffdtype.KindInvalidValue, "state", string(f.State), "not an execution state"))
		return
	}
	after, err := parseAfter(q)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	f.After = after
	xs, err := store.ListExecutions(ctx, c.pool, f)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	data := struct {
		page
		Executions []*ffdtype.Execution
		States     []ffdtype.State
		Filter     store.ExecutionFilter
		Next       string
	}{page: c.page(w, r, "Executions"), Executions: xs, States: ffdtype.States, Filter: f}
	if len(xs) > pageSize {
		data.Executions = xs[:pageSize]
		q.Set("after", xs[pageSize-1].ID.UUID.String())
		data.Next = "/executions?" + q.Encode()
	}
	c.render(w, r, "executions", data)
}

func (c *Console) schedules(w http.ResponseWriter, r *http.Request) {
	ss, err := store.ListSchedules(r.Context(), c.pool)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	c.render(w, r, "schedules", struct {
		page
		Schedules []*store.ScheduleRow
	}{c.page(w, r, "Schedules"), ss})
}

// triggers lists the triggers and the events still to fire, oldest
// first.
func (c *Console) triggers(w http.ResponseWriter, r *http.Request) {
	ts, err := store.ListTriggers(r.Context(), c.pool)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	const countCap = 100000
	es, n, err := store.UnfiredEvents(r.Context(), c.pool, pageSize, countCap)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	rows := make([]triggerRow, len(ts))
	for i, t := range ts {
		rows[i] = triggerRow{TriggerRow: t, Filter: "-"}
		if t.Filter != nil {
			b, _ := json.Marshal(t.Filter)
			rows[i].Filter = string(b)
		}
	}
	c.render(w, r, "triggers", struct {
		page
		Triggers []triggerRow
		Unfired  []*ffdtype.Event
		Waiting  int
		AtCap    bool
	}{c.page(w, r, "Triggers"), rows, es, n, n >= countCap})
}

// triggerRow is a trigger as the triggers page shows it.
type triggerRow struct {
	*store.TriggerRow
	Filter string
}

// isID says whether s is an execution id or a bare uuid.
func isID(s string) bool {
	if _, err := ffdtype.ParseExecutionID(s); err == nil {
		return true
	}
	_, err := ffdtype.ParseUUID("id", s)
	return err == nil
}

// findExecution reads an execution by its full id or its bare uuid.
func (c *Console) findExecution(ctx context.Context, s string) (*ffdtype.Execution, error) {
	s, _ = url.PathUnescape(s)
	if id, err := ffdtype.ParseExecutionID(s); err == nil {
		return leases.Get(ctx, c.pool, id)
	}
	u, err := ffdtype.ParseUUID("execution id", s)
	if err != nil {
		return nil, err
	}
	x, err := leases.GetByUUID(ctx, c.pool, u)
	return x, notFound("execution", u.String(), err)
}

// pretty shows a payload or result: indented when JSON, as text when
// text, as a size otherwise.
func pretty(b []byte) string {
	if len(b) == 0 {
		return "(empty)"
	}
	var v any
	if json.Unmarshal(b, &v) == nil {
		out, _ := json.MarshalIndent(v, "", "  ")
		return string(out)
	}
	if strings.ToValidUTF8(string(b), "") == string(b) {
		return string(b)
	}
	return strconv.Itoa(len(b)) + " bytes of binary"
}

type laneRow struct {
	store.LaneStat
	Lag      string // the oldest due execution's wait at the count ("-": none due)
	Paused   bool
	Max      string
	Finished int // in the last five minutes
	// Flow control (docs/flow-control.md): the rate and its tokens left
	// ("-": none), and for a keyed lane its keys, those holding due work
	// back, and the due executions behind them.
	Rate, Tokens            string
	Keyed                   bool
	Keys, KeysHeld, Waiting int
}

// newLaneRow is the lanes page's row of l, before its lane's controls
// and finished count are filled in ("-": none).
func newLaneRow(l store.LaneStat) *laneRow {
	row := &laneRow{LaneStat: l, Lag: "-", Max: "-", Rate: "-", Tokens: "-"}
	if l.OldestDueAt != nil {
		row.Lag = l.Lag().Round(time.Millisecond).String()
	}
	return row
}

func (c *Console) lanes(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	loads, counted, err := c.laneCounts(ctx)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	controls, err := store.ListLanes(ctx, c.pool)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	recent, err := store.RecentCompletions(ctx, c.pool, 5)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	rates, err := store.LaneRates(ctx, c.pool, 5)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	rows := map[string]*laneRow{}
	var order []string
	for _, l := range loads {
		rows[l.Lane] = newLaneRow(l)
		order = append(order, l.Lane)
	}
	for _, l := range controls {
		row := rows[l.Name]
		if row == nil {
			row = newLaneRow(store.LaneStat{LaneLoad: store.LaneLoad{Lane: l.Name}})
			rows[l.Name] = row
			order = append(order, l.Name)
		}
		row.Paused = l.Paused
		if l.MaxRunning > 0 {
			row.Max = strconv.Itoa(l.MaxRunning)
		}
		if l.Rate != nil {
			row.Rate, row.Tokens = leases.RateString(l.Rate), fmt.Sprintf("%.1f", l.Tokens)
		}
		row.Keyed, row.Keys, row.KeysHeld, row.Waiting = l.Keyed, l.Keys, l.KeysHeld, l.WaitingHeld
	}
	for lane := range rates {
		if rows[lane] == nil {
			rows[lane] = newLaneRow(store.LaneStat{LaneLoad: store.LaneLoad{Lane: lane}})
			order = append(order, lane)
		}
	}
	sort.Strings(order)
	out := make([]*laneRow, 0, len(order))
	for _, name := range order {
		rows[name].Finished = rates[name]
		out = append(out, rows[name])
	}
	c.render(w, r, "lanes", struct {
		page
		Lanes   []*laneRow
		Recent  int
		Counted string
	}{c.page(w, r, "Lanes"), out, recent, counted})
}

// laneStatsFresh is how old the daemons' lane statistics may be for the
// lanes page to show them (four of the default 15 s sample intervals);
// older, or never sampled (no daemon runs), the page counts itself.
const laneStatsFresh = time.Minute

// laneCounts is each lane's live work for the lanes page, and a line
// saying where it came from: the statistics a daemon sampled (one row
// per lane; docs/operations.md, "Lane statistics"), or, when they are
// stale, a count of the live rows now.
func (c *Console) laneCounts(ctx context.Context) ([]store.LaneStat, string, error) {
	stats, at, err := store.LaneStats(ctx, c.pool)
	if err != nil {
		return nil, "", err
	}
	if age := time.Since(at); !at.IsZero() && age <= laneStatsFresh {
		return stats, fmt.Sprintf("Counts sampled by a daemon %s ago.", max(age, 0).Round(time.Second)), nil
	}
	stats, err = store.CountLanes(ctx, c.pool)
	return stats, "Counted now: no daemon has sampled the lanes in the last minute.", err
}

// laneKeys lists a lane's concurrency keys, those holding work back
// first, then by key.
func (c *Console) laneKeys(w http.ResponseWriter, r *http.Request) {
	lane := r.PathValue("lane")
	if err := leases.ValidateName("lane", lane); err != nil {
		c.fail(w, r, err)
		return
	}
	ks, err := store.ListKeys(r.Context(), c.pool, lane, r.URL.Query().Get("after"), 1000)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	next := ""
	if len(ks) == 1000 {
		next = ks[len(ks)-1].Key
	}
	sort.SliceStable(ks, func(i, j int) bool { return ks[i].Held && !ks[j].Held })
	type keyRow struct {
		*ffdtype.Key
		Name, Max, Rate, Tokens, Served string
	}
	rows := make([]keyRow, len(ks))
	for i, k := range ks {
		row := keyRow{Key: k, Name: k.Key, Max: "-", Rate: leases.RateString(k.Rate), Tokens: "-", Served: "never"}
		if k.Key == "" {
			row.Name = "(no key)"
		}
		if k.MaxRunning > 0 {
			row.Max = strconv.Itoa(k.MaxRunning)
		}
		if k.Rate != nil {
			row.Tokens = fmt.Sprintf("%.1f", k.Tokens)
		}
		if k.ServedAt != nil {
			row.Served = k.ServedAt.UTC().Format("2006-01-02 15:04:05.000")
		}
		rows[i] = row
	}
	c.render(w, r, "keys", struct {
		page
		Lane string
		Keys []keyRow
		Next string
	}{c.page(w, r, "Keys of "+lane), lane, rows, next})
}

func (c *Console) consumers(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	cs, err := store.ConsumerLags(ctx, c.pool)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	slots, err := store.Slots(ctx, c.pool)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	c.render(w, r, "consumers", struct {
		page
		Consumers []store.ConsumerLag
		Slots     []store.Slot
	}{c.page(w, r, "Consumers"), cs, slots})
}

func itoa(n int) string { return strconv.Itoa(n) }

// parseWhen reads a date or an RFC 3339 time.
func parseWhen(s string) (time.Time, error) {
	if t, err := time.Parse("2006-01-02", s); err == nil {
		return t, nil
	}
	return time.Parse(time.RFC3339, s)
}
