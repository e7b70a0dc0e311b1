package ffd

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/flowfabric/ffd/internal/fault"
	"github.com/flowfabric/ffd/internal/listener"
	"github.com/flowfabric/ffd/internal/session"
	"github.com/flowfabric/ffd/internal/store"
)

// Defaults of WorkerAPIConfig.
const (
	// DefaultWorkerAPIMaxWait bounds how long a claim may wait for work.
	DefaultWorkerAPIMaxWait = 30 * time.Second
	// WorkerAPIPrefix is the path under which WorkerAPI answers.
	WorkerAPIPrefix = "/v1/worker/"
	// maxWorkerAPIBody bounds a request body: a result at the largest
	// payload limit, as JSON, with room for the envelope.
	maxWorkerAPIBody = MaxMaxPayloadBytes + 1<<16
)

// WorkerAPIConfig configures a WorkerAPI.
type WorkerAPIConfig struct {
	// Tokens are the bearer tokens a request may carry
	// (Authorization: Bearer TOKEN). At least one is required: the
	// protocol completes and fails work, so it never runs open.
	Tokens []string
	// MaxWait bounds a claim's wait_ms. Default DefaultWorkerAPIMaxWait.
	MaxWait time.Duration
	// Logger receives failures the caller is only told were internal.
	// Default: none.
	Logger *zap.Logger
	// Registerer, when set, receives the protocol's metrics:
	// ffd_worker_api_requests_total{call, status} and
	// ffd_worker_api_request_seconds{call}. Default: none.
	Registerer prometheus.Registerer
}

// WorkerAPI serves the worker protocol over HTTP (docs/worker-protocol.md):
// claim, renew, complete and fail, for handlers written in languages
// other than Go. Each call is the Client's own operation (Claim, Renew,
// Complete, Fail), so fencing, retries, backoff and the daemon's
// wake-ups are those of a Go worker, implemented once. `ffd run
// --worker-api` mounts it on the admin address.
type WorkerAPI struct {
	c      *Client
	tokens [][]byte
	wait   time.Duration
	log    *zap.Logger
	mux    *http.ServeMux
	// done records completions in batches, as a Go worker's do (group
	// commit): a worker in another language completes one execution a
	// request, and many requests at once share a transaction.
	done *completer
	// wakes wakes the claims waiting on a lane when ff_ready names it,
	// which listen hears on a connection of its own.
	wakes  laneWakes
	listen *listener.Listener
	// revokes hands ff_revoke, heard on the same connection, to the watch
	// calls.
	revokes revokeHub
	// requests and seconds are the metrics; nil without a Registerer.
	requests *prometheus.CounterVec
	seconds  *prometheus.HistogramVec
}

// workerAPICalls are the calls of the protocol, as the metrics' call
// label names them ("other" for any other path).
var workerAPICalls = []string{"claim", "renew", "complete", "fail", "watch"}

// register makes the metrics in reg, each call's series at 0.
func (a *WorkerAPI) register(reg prometheus.Registerer) error {
	a.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ffd_worker_api_requests_total",
		Help: "Worker protocol requests answered, by call and HTTP status."}, []string{"call", "status"})
	a.seconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "ffd_worker_api_request_seconds",
		Help:    "Time to answer a worker protocol request (a claim's or a watch's wait included), by call.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10)}, []string{"call"})
	for _, c := range workerAPICalls {
		a.requests.WithLabelValues(c, "200")
		a.seconds.WithLabelValues(c)
	}
	for _, c := range []prometheus.Collector{a.requests, a.seconds} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("register the worker API's metrics: %w", err)
		}
	}
	return nil
}

// statusWriter keeps the status an answer was written with.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// laneWakes hands each claim waiting on a lane a channel that is closed
// when the lane has work due.
type laneWakes struct {
	mu sync.Mutex
	ch map[string]chan struct{}
}

func (w *laneWakes) on(lane string) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	c, ok := w.ch[lane]
	if !ok {
		if w.ch == nil {
			w.ch = map[string]chan struct{}{}
		}
		c = make(chan struct{})
		w.ch[lane] = c
	}
	return c
}

// wake wakes lane's waiters, or every lane's for "".
func (w *laneWakes) wake(lane string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for l, c := range w.ch {
		if lane == "" || l == lane {
			close(c)
			delete(w.ch, l)
		}
	}
}

// NewWorkerAPI returns the worker protocol's handler over c. It starts
// what serves it in the background (a LISTEN connection for ff_ready, the
// completions' group commit); Close stops them.
func NewWorkerAPI(c *Client, cfg WorkerAPIConfig) (*WorkerAPI, error) {
	if c == nil {
		return nil, errors.New("ffd: NewWorkerAPI needs a Client")
	}
	if len(cfg.Tokens) == 0 {
		return nil, errors.New("ffd: the worker API needs at least one token")
	}
	a := &WorkerAPI{c: c, wait: cfg.MaxWait, log: cfg.Logger, mux: http.NewServeMux()}
	for _, t := range cfg.Tokens {
		if len(t) < 16 {
			return nil, errors.New("ffd: a worker API token must be at least 16 characters")
		}
		a.tokens = append(a.tokens, []byte(t))
	}
	if a.wait <= 0 {
		a.wait = DefaultWorkerAPIMaxWait
	}
	if a.log == nil {
		a.log = zap.NewNop()
	}
	if cfg.Registerer != nil {
		if err := a.register(cfg.Registerer); err != nil {
			return nil, err
		}
	}
	a.done = newCompleter(c, DefaultCompletionLockTimeout, nil, a.log, maxCompletionBatch)
	if err := a.done.Start(context.Background()); err != nil {
		return nil, err
	}
	if err := a.startListening(); err != nil {
		_ = a.done.Stop(context.Background())
		return nil, err
	}
	a.mux.HandleFunc("POST "+WorkerAPIPrefix+"claim", serve(a, a.claim))
	a.mux.HandleFunc("POST "+WorkerAPIPrefix+"renew", serve(a, a.renew))
	a.mux.HandleFunc("POST "+WorkerAPIPrefix+"complete", serve(a, a.complete))
	a.mux.HandleFunc("POST "+WorkerAPIPrefix+"fail", serve(a, a.fail))
	a.mux.HandleFunc("POST "+WorkerAPIPrefix+"watch", serve(a, a.watchLeases))
	return a, nil
}

// startListening LISTENs for ff_ready and ff_revoke on a connection of
// the client's pool's configuration, so that a waiting claim is answered
// as soon as its lane has work, and a watch as soon as its lease is taken
// away; after a reconnect (notifications sent meanwhile are lost) it wakes
// every waiting claim to look again (a watch's fallback is the worker's
// next renewal).
func (a *WorkerAPI) startListening() error {
	cfg := a.c.pool.Config().ConnConfig.Copy()
	if !session.Guarded(&cfg.Config) {
		session.Apply(session.Default(), cfg)
	}
	l, err := listener.New(listener.Config{
		ConnConfig: cfg, ApplicationName: WorkerAPIApplicationName, Topics: []listener.Topic{listener.Ready, listener.Revoke},
		Handle: func(n listener.Notification) {
			for _, item := range store.SplitPayload(n.Payload) {
				if n.Topic == listener.Revoke {
					if id, epoch, ok := parseRevoke(item); ok {
						a.revokes.revoked(id, epoch)
					}
					continue
				}
				a.wakes.wake(item)
			}
		},
		OnConnect: func(context.Context, bool) { a.wakes.wake("") },
		Logger:    a.log.Named("listener"),
	})
	if err != nil {
		return err
	}
	a.listen = l
	return l.Start(context.Background())
}

// WorkerAPIApplicationName is the application_name of the worker API's
// LISTEN connection.
const WorkerAPIApplicationName = "ffd-worker-api"

// Close records the completions under way and stops; a completion asked
// for after Close is recorded on its own.
func (a *WorkerAPI) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), finishTimeout)
	defer cancel()
	err := a.listen.Stop(ctx)
	return errors.Join(err, a.done.Stop(ctx))
}

// ServeHTTP answers a request of the protocol, after its token.
func (a *WorkerAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if a.requests != nil {
		start, sw := time.Now(), &statusWriter{ResponseWriter: w, status: http.StatusOK}
		defer func() {
			call := strings.TrimPrefix(r.URL.Path, WorkerAPIPrefix)
			if !slices.Contains(workerAPICalls, call) {
				call = "other"
			}
			a.requests.WithLabelValues(call, strconv.Itoa(sw.status)).Inc()
			a.seconds.WithLabelValues(call).Observe(time.Since(start).Seconds())
		}()
		w = sw
	}
	if !a.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="ffd"`)
		writeWire(w, http.StatusUnauthorized, fault.Wire{Code: "unauthorized", Message: "a valid bearer token is required"})
		return
	}
	a.mux.ServeHTTP(w, r)
}

// authorized compares the token with every configured one in constant
// time, so that timing tells nothing of how much of a token matched.
func (a *WorkerAPI) authorized(r *http.Request) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return false
	}
	match := 0
	for _, t := range a.tokens {
		match |= subtle.ConstantTimeCompare([]byte(got), t)
	}
	return match == 1
}

// serve decodes a request's JSON body into In (strictly: an unknown
// field is a validation error), runs op and writes its answer or error.
func serve[In, Out any](a *WorkerAPI, op func(context.Context, *In) (*Out, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var in In
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxWorkerAPIBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&in); err != nil {
			var ve *ValidationError
			if !errors.As(err, &ve) { // a malformed id says so itself
				ve = fault.Invalid(KindInvalidValue, "body", "", "want one JSON object of the request's schema: "+err.Error())
			}
			writeWire(w, http.StatusBadRequest, fault.ToWire(ve))
			return
		}
		if _, err := dec.Token(); !errors.Is(err, io.EOF) {
			writeWire(w, http.StatusBadRequest, fault.ToWire(fault.Invalid(KindInvalidValue, "body", "", "more than one JSON value")))
			return
		}
		out, err := op(r.Context(), &in)
		if err != nil {
			wire := fault.ToWire(err)
			if wire.Code == fault.CodeInternal {
				a.log.Error("worker API call failed", zap.String("path", r.URL.Path), zap.Error(err))
			}
			writeWire(w, wireStatus(wire.Code), wire)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(out) //nolint:errcheck // the caller went away
	}
}

func wireStatus(code string) int {
	switch code {
	case fault.CodeValidation:
		return http.StatusBadRequest
	case fault.CodeNotFound:
		return http.StatusNotFound
	case fault.CodeLeaseLost, fault.CodeAlreadyTerminal, fault.CodeConflict:
		return http.StatusConflict
	}
	return http.StatusInternalServerError
}

func writeWire(w http.ResponseWriter, status int, e fault.Wire) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(struct { //nolint:errcheck // the caller went away
		Error fault.Wire `json:"error"`
	}{e})
}

// The protocol's messages (docs/worker-protocol.md has their JSON
// Schema).
type (
	apiClaim struct {
		Lane         string   `json:"lane"`
		Worker       string   `json:"worker"`
		Capabilities []string `json:"capabilities"`
		Max          int      `json:"max"`
		WaitMS       int64    `json:"wait_ms"`
	}
	apiJob struct {
		ID             ExecutionID                `json:"id"`
		Epoch          int64                      `json:"epoch"`
		Attempt        int                        `json:"attempt"`
		MaxAttempts    int                        `json:"max_attempts"`
		Lane           string                     `json:"lane"`
		Kind           string                     `json:"kind"`
		Namespace      string                     `json:"namespace"`
		FlowID         *string                    `json:"flow_id"`
		Step           string                     `json:"step"`
		Payload        json.RawMessage            `json:"payload"`
		PayloadBase64  []byte                     `json:"payload_base64,omitempty"`
		LeaseTTLMS     int64                      `json:"lease_ttl_ms"`
		LeaseExpiresAt *time.Time                 `json:"lease_expires_at"`
		Upstreams      map[string]json.RawMessage `json:"upstreams,omitempty"`
	}
	apiJobs struct {
		Executions []apiJob `json:"executions"`
	}
	apiFence struct {
		ID    ExecutionID `json:"id"`
		Epoch int64       `json:"epoch"`
	}
	apiRenewed struct {
		LeaseExpiresAt time.Time `json:"lease_expires_at"`
	}
	apiComplete struct {
		ID     ExecutionID     `json:"id"`
		Epoch  int64           `json:"epoch"`
		Result json.RawMessage `json:"result"`
	}
	apiFail struct {
		ID    ExecutionID `json:"id"`
		Epoch int64       `json:"epoch"`
		Error string      `json:"error"`
		// Retryable defaults to true: a handler's error is retried unless
		// it says it is permanent.
		Retryable *bool `json:"retryable"`
		Immediate bool  `json:"immediate"`
	}
	apiEnding struct {
		State    State      `json:"state"`
		Attempt  int        `json:"attempt"`
		RunAt    *time.Time `json:"run_at,omitempty"`
		Repeated bool       `json:"repeated"`
	}
)

// claim claims, waiting up to wait_ms (bounded by MaxWait) for work: it
// claims again when ff_ready names the lane, and polls meanwhile (from
// 20 ms doubling to a second: a notification can be lost).
func (a *WorkerAPI) claim(ctx context.Context, in *apiClaim) (*apiJobs, error) {
	wait := time.Duration(in.WaitMS) * time.Millisecond
	if in.WaitMS < 0 || wait > a.wait {
		return nil, fault.Invalid(KindOutOfRange, "wait_ms", fmt.Sprint(in.WaitMS), fmt.Sprintf("want 0 to %d", a.wait.Milliseconds()))
	}
	deadline := time.Now().Add(wait)
	for pause := 20 * time.Millisecond; ; pause = min(2*pause, time.Second) {
		ready := a.wakes.on(in.Lane)
		xs, err := a.c.Claim(ctx, ClaimParams{Lane: in.Lane, Worker: in.Worker, Capabilities: in.Capabilities, Max: in.Max})
		if err != nil {
			return nil, err
		}
		if len(xs) > 0 || !time.Now().Before(deadline) {
			return a.jobs(ctx, xs)
		}
		t := time.NewTimer(min(pause, time.Until(deadline)))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-ready:
			t.Stop()
		case <-t.C:
		}
	}
}

// jobs is what a worker needs of each claimed execution, with the
// results of a flow member's completed upstreams by step, read for all
// of them in one round trip.
func (a *WorkerAPI) jobs(ctx context.Context, xs []*Execution) (*apiJobs, error) {
	out := &apiJobs{Executions: make([]apiJob, len(xs))}
	var members []store.FlowMember
	var at []int // the job each member is
	for i, x := range xs {
		j := apiJob{ID: x.ID, Epoch: x.LeaseEpoch, Attempt: x.Attempt, MaxAttempts: x.MaxAttempts, Lane: x.Lane,
			Kind: x.Kind, Namespace: x.Namespace, Step: x.Step, LeaseTTLMS: x.LeaseTTL.Milliseconds(),
			LeaseExpiresAt: x.LeaseExpiresAt}
		switch {
		case len(x.Payload) == 0:
		case json.Valid(x.Payload):
			j.Payload = x.Payload
		default:
			j.PayloadBase64 = x.Payload
		}
		if x.FlowID != nil {
			s := x.FlowID.String()
			j.FlowID = &s
			members, at = append(members, store.FlowMember{FlowID: *x.FlowID, ID: x.ID}), append(at, i)
		}
		out.Executions[i] = j
	}
	ups, err := store.UpstreamsOfEach(ctx, a.c.pool, members)
	if err != nil {
		return nil, err
	}
	for k, us := range ups {
		j := &out.Executions[at[k]]
		for _, u := range us {
			if u.State == StateCompleted && json.Valid(u.Result) {
				if j.Upstreams == nil {
					j.Upstreams = map[string]json.RawMessage{}
				}
				j.Upstreams[u.Step] = u.Result
			}
		}
	}
	return out, nil
}

func (a *WorkerAPI) renew(ctx context.Context, in *apiFence) (*apiRenewed, error) {
	r, err := a.c.Renew(ctx, in.ID, in.Epoch)
	if err != nil {
		return nil, err
	}
	return &apiRenewed{LeaseExpiresAt: r.LeaseExpiresAt}, nil
}

func (a *WorkerAPI) complete(ctx context.Context, in *apiComplete) (*apiEnding, error) {
	result := []byte(in.Result)
	if string(in.Result) == "null" {
		result = nil
	}
	type answer struct {
		e   *Ending
		err error
	}
	ch := make(chan answer, 1)
	x := &Execution{ID: in.ID, LeaseEpoch: in.Epoch}
	a.done.Complete(x, result, false, func(e *Ending, err error) { ch <- answer{e, err} })
	select {
	case got := <-ch:
		if got.err != nil {
			return nil, got.err
		}
		return ending(got.e), nil
	case <-ctx.Done():
		// The caller went away; the completion is still recorded.
		return nil, ctx.Err()
	}
}

func (a *WorkerAPI) fail(ctx context.Context, in *apiFail) (*apiEnding, error) {
	retry := in.Retryable == nil || *in.Retryable
	e, err := a.c.Fail(ctx, in.ID, in.Epoch, FailParams{Error: in.Error, Retryable: retry, Immediate: in.Immediate})
	if err != nil {
		return nil, err
	}
	return ending(e), nil
}

func ending(e *Ending) *apiEnding {
	out := &apiEnding{State: e.State, Attempt: e.Attempt, Repeated: e.Repeated}
	if e.State == StatePending {
		out.RunAt = &e.RunAt
	}
	return out
}
