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

	"github.com/flowfabric/ffd/internal/fault"
	"github.com/flowfabric/ffd/internal/ident"
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
	csrf string
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
		"ts": func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05") },
		"tsp": func(t *time.Time) string {
			if t == nil {
				return ""
			}
			return t.UTC().Format("2006-01-02 15:04:05")
		},
		"deref": func(s *string) string {
			if s == nil {
				return ""
			}
			return *s
		},
		"add":     func(a, b int) int { return a + b },
		"deref64": func(f *float64) float64 { return *f },
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
		mux: http.NewServeMux(), auth: cfg.Auth, csrf: newCSRF()}
	c.routeActions()
	c.mux.Handle("GET /assets/", http.FileServerFS(assets))
	c.mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/flows", http.StatusFound) })
	c.mux.HandleFunc("GET /flows", c.flows)
	c.mux.HandleFunc("GET /flows/{id}", c.flow)
	c.mux.HandleFunc("GET /flows/{id}/live", c.live)
	c.mux.HandleFunc("GET /executions/{id}", c.execution)
	c.mux.HandleFunc("GET /lanes", c.lanes)
	c.mux.HandleFunc("GET /consumers", c.consumers)
	return c, nil
}

// ServeHTTP serves the console.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Security-Policy", "default-src 'self'")
	w.Header().Set("X-Frame-Options", "DENY")
	c.mux.ServeHTTP(w, r)
}

// Close stops live updates.
func (c *Console) Close() { c.hub.close() }

// page is what every page template gets.
type page struct {
	Title    string
	ReadOnly bool
	CSRF     string
	Token    bool // the action forms ask for the token
}

// page is the common part of a page titled title.
func (c *Console) page(title string) page {
	return page{Title: title, ReadOnly: !c.auth.enabled(), CSRF: c.csrf, Token: c.auth.Token != ""}
}

func (c *Console) render(w http.ResponseWriter, name string, data any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := c.tmpl.ExecuteTemplate(w, name, data); err != nil {
		c.log.Warn("render console page", zap.String("page", name), zap.Error(err))
	}
}

// fail answers an error: 404 for what does not exist, 400 for bad input.
func (c *Console) fail(w http.ResponseWriter, err error) {
	var nf *fault.NotFoundError
	var ve *fault.ValidationError
	switch {
	case errors.As(err, &nf), errors.Is(err, pgx.ErrNoRows):
		http.Error(w, err.Error(), http.StatusNotFound)
	case errors.As(err, &ve):
		http.Error(w, err.Error(), http.StatusBadRequest)
	default:
		c.log.Warn("console request failed", zap.Error(err))
		http.Error(w, "internal error", http.StatusInternalServerError)
	}
}

type stateCount struct {
	State store.FlowState
	N     int
}

func (c *Console) flows(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := store.FlowFilter{Namespace: q.Get("namespace"), State: store.FlowState(q.Get("state")), Kind: q.Get("kind"), Limit: pageSize + 1}
	for _, b := range []struct {
		name string
		to   **time.Time
	}{{"from", &f.From}, {"to", &f.To}} {
		if v := q.Get(b.name); v != "" {
			t, err := parseWhen(v)
			if err != nil {
				c.fail(w, fault.Invalid(fault.KindInvalidValue, b.name, v, "want a date (2026-11-22) or a time (RFC 3339)"))
				return
			}
			*b.to = &t
		}
	}
	if a := q.Get("after"); a != "" {
		u, err := ident.ParseUUID("after", a)
		if err != nil {
			c.fail(w, err)
			return
		}
		f.After = &u
	}
	fs, err := store.ListFlows(r.Context(), c.pool, f)
	if err != nil {
		c.fail(w, err)
		return
	}
	counts, err := store.FlowStateCounts(r.Context(), c.pool, f.Namespace)
	if err != nil {
		c.fail(w, err)
		return
	}
	data := struct {
		page
		Flows  []*store.Flow
		Counts []stateCount
		States []store.FlowState
		Filter store.FlowFilter
		Next   string
	}{page: c.page("Flows"), Flows: fs, States: store.FlowStates, Filter: f}
	for _, s := range store.FlowStates {
		data.Counts = append(data.Counts, stateCount{s, counts[s]})
	}
	if len(fs) > pageSize {
		data.Flows = fs[:pageSize]
		q.Set("after", fs[pageSize-1].ID.String())
		data.Next = "/flows?" + q.Encode()
	}
	c.render(w, "flows", data)
}

func (c *Console) flow(w http.ResponseWriter, r *http.Request) {
	id, err := ident.ParseUUID("flow id", r.PathValue("id"))
	if err != nil {
		c.fail(w, err)
		return
	}
	ctx := r.Context()
	f, err := store.GetFlow(ctx, c.pool, id)
	if err != nil {
		c.fail(w, err)
		return
	}
	members, err := store.FlowMembers(ctx, c.pool, id)
	if err != nil {
		c.fail(w, err)
		return
	}
	edges, err := store.FlowEdges(ctx, c.pool, id)
	if err != nil {
		c.fail(w, err)
		return
	}
	groups, err := store.ListGroups(ctx, c.pool, id)
	if err != nil {
		c.fail(w, err)
		return
	}
	c.render(w, "flow", struct {
		page
		Flow  *store.Flow
		Graph *graph
	}{c.page("Flow " + id.String()), f, layout(members, edges, groups)})
}

// live streams a flow's states as server-sent events: at once, then
// after every notification that changed them. A page that closes ends
// its stream; the last one to close stops the console's LISTEN.
func (c *Console) live(w http.ResponseWriter, r *http.Request) {
	id, err := ident.ParseUUID("flow id", r.PathValue("id"))
	if err != nil {
		c.fail(w, err)
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

// states is the flow's and its steps' states as JSON.
func (c *Console) states(ctx context.Context, id uuid.UUID) (string, error) {
	f, err := store.GetFlow(ctx, c.pool, id)
	if err != nil {
		return "", err
	}
	members, err := store.FlowMembers(ctx, c.pool, id)
	if err != nil {
		return "", err
	}
	steps := make(map[string]string, len(members))
	for _, x := range members {
		steps[x.ID.String()] = string(x.State)
	}
	b, err := json.Marshal(map[string]any{"flow": f.State, "steps": steps})
	return string(b), err
}

func (c *Console) execution(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	x, err := c.findExecution(ctx, r.PathValue("id"))
	if err != nil {
		c.fail(w, err)
		return
	}
	attempts, err := store.ListAttempts(ctx, c.pool, x.ID)
	if err != nil {
		c.fail(w, err)
		return
	}
	data := struct {
		page
		X               *store.Execution
		Attempts        []store.Attempt
		Upstreams       []store.Upstream
		Downstreams     []string
		Payload, Result string
	}{page: c.page("Execution " + x.ID.String()), X: x, Attempts: attempts,
		Payload: pretty(x.Payload), Result: pretty(x.Result)}
	if x.FlowID != nil {
		if data.Upstreams, err = store.UpstreamsOf(ctx, c.pool, *x.FlowID, x.ID); err != nil {
			c.fail(w, err)
			return
		}
		outs, err := store.EdgesOutOf(ctx, c.pool, *x.FlowID, x.ID)
		if err != nil {
			c.fail(w, err)
			return
		}
		for _, e := range outs {
			data.Downstreams = append(data.Downstreams, e.Downstream.String())
		}
	}
	c.render(w, "execution", data)
}

// findExecution reads an execution by its full id or its bare uuid.
func (c *Console) findExecution(ctx context.Context, s string) (*store.Execution, error) {
	s, _ = url.PathUnescape(s)
	if id, err := ident.ParseExecutionID(s); err == nil {
		return leases.Get(ctx, c.pool, id)
	}
	u, err := ident.ParseUUID("execution id", s)
	if err != nil {
		return nil, err
	}
	return leases.GetByUUID(ctx, c.pool, u)
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
	store.LaneLoad
	Paused   bool
	Max      string
	Finished int // in the last five minutes
}

func (c *Console) lanes(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	loads, err := store.LaneLoads(ctx, c.pool)
	if err != nil {
		c.fail(w, err)
		return
	}
	controls, err := store.ListLanes(ctx, c.pool)
	if err != nil {
		c.fail(w, err)
		return
	}
	recent, err := store.RecentCompletions(ctx, c.pool, 5)
	if err != nil {
		c.fail(w, err)
		return
	}
	rates, err := store.LaneRates(ctx, c.pool, 5)
	if err != nil {
		c.fail(w, err)
		return
	}
	rows := map[string]*laneRow{}
	var order []string
	for _, l := range loads {
		rows[l.Lane] = &laneRow{LaneLoad: l, Max: "-"}
		order = append(order, l.Lane)
	}
	for _, l := range controls {
		row := rows[l.Lane]
		if row == nil {
			row = &laneRow{LaneLoad: store.LaneLoad{Lane: l.Lane}, Max: "-"}
			rows[l.Lane] = row
			order = append(order, l.Lane)
		}
		row.Paused = l.Paused
		if l.MaxRunning != nil {
			row.Max = strconv.Itoa(*l.MaxRunning)
		}
	}
	for lane := range rates {
		if rows[lane] == nil {
			rows[lane] = &laneRow{LaneLoad: store.LaneLoad{Lane: lane}, Max: "-"}
			order = append(order, lane)
		}
	}
	sort.Strings(order)
	out := make([]*laneRow, 0, len(order))
	for _, name := range order {
		rows[name].Finished = rates[name]
		out = append(out, rows[name])
	}
	c.render(w, "lanes", struct {
		page
		Lanes  []*laneRow
		Recent int
	}{c.page("Lanes"), out, recent})
}

func (c *Console) consumers(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	cs, err := store.ConsumerLags(ctx, c.pool)
	if err != nil {
		c.fail(w, err)
		return
	}
	slots, err := store.Slots(ctx, c.pool)
	if err != nil {
		c.fail(w, err)
		return
	}
	c.render(w, "consumers", struct {
		page
		Consumers []store.ConsumerLag
		Slots     []store.Slot
	}{c.page("Consumers"), cs, slots})
}

func itoa(n int) string { return strconv.Itoa(n) }

// parseWhen reads a date or an RFC 3339 time.
func parseWhen(s string) (time.Time, error) {
	if t, err := time.Parse("2006-01-02", s); err == nil {
		return t, nil
	}
	return time.Parse(time.RFC3339, s)
}
