package ffd

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// How a handler's run ended: the values of the outcome label of
// ffd_worker_handler_seconds and ffd_worker_executions_total. (Not to be
// confused with an Outcome, how an execution ended, which its completion
// event records.)
const (
	HandlerCompleted = "completed"  // the result was recorded
	HandlerRetried   = "retried"    // failed; another attempt will run
	HandlerFailed    = "failed"     // failed for good (permanent error or attempts exhausted)
	HandlerLeaseLost = "lease_lost" // the lease moved on (cancelled, revoked, expired): the result was dropped
	HandlerStopped   = "stopped"    // handed back by Stop
	HandlerSuspended = "suspended"  // ended its attempt in a wait (Sleep, WaitForSignal)
)

// WorkerMetrics are the Prometheus metrics of the workers of a process.
// Make them once and pass them to every worker (WorkerConfig.Metrics);
// a worker without them measures nothing and pays nothing.
type WorkerMetrics struct {
	gatherer        prometheus.Gatherer
	handlerSeconds  *prometheus.HistogramVec
	executions      *prometheus.CounterVec
	inFlight        *prometheus.GaugeVec
	claimBatch      prometheus.Histogram
	completionBatch prometheus.Histogram
	throttled       *prometheus.CounterVec
}

// NewWorkerMetrics registers the worker metrics in reg; nil: a registry
// of their own, served by Handler.
//
//   - ffd_worker_handler_seconds{kind, outcome}: handler run time;
//   - ffd_worker_executions_total{lane, outcome}: handlers that ended,
//     the throughput by lane and outcome;
//   - ffd_worker_in_flight{lane}: handlers running;
//   - ffd_worker_claim_batch_size: executions per claim that found work;
//   - ffd_worker_completion_batch_seconds: the commit of one group of
//     completions;
//   - ffd_worker_claims_throttled_total{lane}: claims that took less
//     than they asked for while due executions waited behind the lane's
//     cap or rate, or their keys' limits (docs/flow-control.md).
func NewWorkerMetrics(reg prometheus.Registerer) (*WorkerMetrics, error) {
	var gatherer prometheus.Gatherer
	if reg == nil {
		r := prometheus.NewRegistry()
		reg, gatherer = r, r
	} else if g, ok := reg.(prometheus.Gatherer); ok {
		gatherer = g
	}
	m := &WorkerMetrics{
		gatherer: gatherer,
		handlerSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "ffd_worker_handler_seconds",
			Help:    "Handler run time by execution kind and outcome (completed, retried, failed, lease_lost, stopped).",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10)}, []string{"kind", "outcome"}),
		executions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ffd_worker_executions_total",
			Help: "Handlers that ended, by lane and outcome (completed, retried, failed, lease_lost, stopped)."}, []string{"lane", "outcome"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ffd_worker_in_flight",
			Help: "Handlers running, by lane."}, []string{"lane"}),
		claimBatch: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ffd_worker_claim_batch_size",
			Help: "Executions taken by one claim that found work.", Buckets: prometheus.ExponentialBuckets(1, 2, 11)}),
		completionBatch: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ffd_worker_completion_batch_seconds",
			Help: "Time to commit one group of completions.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 12)}),
		throttled: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ffd_worker_claims_throttled_total",
			Help: "Claims that took less than they asked for while due executions waited behind a lane's cap or rate or their keys' limits, by lane."}, []string{"lane"}),
	}
	for _, c := range []prometheus.Collector{m.handlerSeconds, m.executions, m.inFlight, m.claimBatch, m.completionBatch, m.throttled} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Handler serves the metrics in the Prometheus text format, for the
// application to mount (for example on /metrics). It serves nothing when
// the metrics went into a Registerer that is not also a Gatherer.
func (m *WorkerMetrics) Handler() http.Handler {
	if m.gatherer == nil {
		return http.NotFoundHandler()
	}
	return promhttp.HandlerFor(m.gatherer, promhttp.HandlerOpts{})
}

// The worker's hooks; each is a no-op on a nil *WorkerMetrics.

func (m *WorkerMetrics) handled(lane, kind, outcome string, d time.Duration) {
	if m != nil {
		// The count first: a scrape that sees a run's duration sees it
		// counted too (TestWorkerMetrics waits on the durations).
		m.executions.WithLabelValues(lane, outcome).Inc()
		m.handlerSeconds.WithLabelValues(kind, outcome).Observe(d.Seconds())
	}
}

func (m *WorkerMetrics) running(lane string, delta float64) {
	if m != nil {
		m.inFlight.WithLabelValues(lane).Add(delta)
	}
}

func (m *WorkerMetrics) claimed(n int) {
	if m != nil && n > 0 {
		m.claimBatch.Observe(float64(n))
	}
}

func (m *WorkerMetrics) throttle(lane string) {
	if m != nil {
		m.throttled.WithLabelValues(lane).Inc()
	}
}

func (m *WorkerMetrics) committed(d time.Duration) {
	if m != nil {
		m.completionBatch.Observe(d.Seconds())
	}
}
