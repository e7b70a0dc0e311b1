package daemon

import (
	"time"

	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/store"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics are the daemon's Prometheus metrics. Names are stable: alerts
// and dashboards depend on them (docs/operations.md).
type Metrics struct {
	registry          *prometheus.Registry
	eventsDispatched  prometheus.Counter
	dispatchDelay     prometheus.Histogram
	edgesResolved     *prometheus.CounterVec
	decisions         *prometheus.CounterVec
	siblingsCancelled prometheus.Counter
	leasesExpired     *prometheus.CounterVec
	leaseTimers       *prometheus.CounterVec
	deadlinesExpired  prometheus.Counter
	sweepFound        *prometheus.CounterVec
	reconnects        prometheus.Counter
	droppedHints      *prometheus.CounterVec
	executions        *prometheus.GaugeVec
	readyNotified     prometheus.Counter
	outboxDeleted     *prometheus.CounterVec
	idleConsumers     prometheus.Gauge
}

// NewMetrics registers the metrics in a registry of their own.
func NewMetrics() *Metrics {
	r := prometheus.NewRegistry()
	m := &Metrics{
		registry: r,
		eventsDispatched: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ffd_events_dispatched_total", Help: "Completion events dispatched by this daemon.",
		}),
		dispatchDelay: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ffd_dispatch_delay_seconds",
			Help:    "Age of a completion event when dispatched: from its insert to its dispatch (database clock).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}),
		edgesResolved: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ffd_edges_resolved_total", Help: "Edges resolved, by upstream outcome class (success, failed, skipped).",
		}, []string{"outcome"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ffd_group_decisions_total", Help: "Edge groups decided, by decision (satisfied, impossible).",
		}, []string{"decision"}),
		siblingsCancelled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ffd_siblings_cancelled_total", Help: "Sibling upstreams cancelled after a cancel_remaining group was satisfied.",
		}),
		leasesExpired: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ffd_leases_expired_total",
			Help: "Running attempts ended for lack of time, by reason (lease_lapsed, attempt_timeout) and result (retried, expired).",
		}, []string{"reason", "result"}),
		leaseTimers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ffd_lease_timers_total",
			Help: "Lease expiry timers that came due, by outcome: checked (a query under the row lock) or ended (the lease was known to have ended: no query).",
		}, []string{"outcome"}),
		deadlinesExpired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ffd_deadlines_expired_total", Help: "Executions expired because their deadline passed.",
		}),
		sweepFound: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ffd_sweep_found_total",
			Help: "Work the fallback sweep found that notifications should have delivered, by kind.",
		}, []string{"kind"}),
		reconnects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ffd_listener_reconnects_total", Help: "Reconnects of the LISTEN connection.",
		}),
		droppedHints: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ffd_dropped_hints_total", Help: "Notifications dropped because a worker queue was full (the sweep catches up), by queue.",
		}, []string{"queue"}),
		executions: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ffd_executions", Help: "Live executions by lane and state, sampled periodically.",
		}, []string{"lane", "state"}),
		readyNotified: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ffd_ready_notified_total", Help: "ff_ready notifications sent for lanes whose delayed executions came due.",
		}),
		outboxDeleted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ffd_outbox_deleted_total", Help: "Outbox events deleted by retention, by stream.",
		}, []string{"stream"}),
		idleConsumers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ffd_outbox_idle_consumers", Help: "Named consumers idle beyond the limit while events wait for them.",
		}),
	}
	r.MustRegister(m.outboxDeleted, m.idleConsumers, m.eventsDispatched, m.dispatchDelay, m.edgesResolved, m.decisions, m.siblingsCancelled,
		m.leasesExpired, m.leaseTimers, m.deadlinesExpired, m.sweepFound, m.reconnects, m.droppedHints, m.executions, m.readyNotified,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry is where the metrics live.
func (m *Metrics) Registry() *prometheus.Registry { return m.registry }

// Dispatched implements cascade.Hooks.
func (m *Metrics) Dispatched(n int, delays []time.Duration) {
	m.eventsDispatched.Add(float64(n))
	for _, d := range delays {
		m.dispatchDelay.Observe(d.Seconds())
	}
}

// Resolved implements cascade.Hooks.
func (m *Metrics) Resolved(by map[string]int, dec map[store.Decision]int) {
	for k, v := range by {
		if v > 0 {
			m.edgesResolved.WithLabelValues(k).Add(float64(v))
		}
	}
	for k, v := range dec {
		m.decisions.WithLabelValues(string(k)).Add(float64(v))
	}
}

// SiblingsCancelled implements cascade.Hooks.
func (m *Metrics) SiblingsCancelled(n int) { m.siblingsCancelled.Add(float64(n)) }

// recordExpired counts the leases an expiry ended, by reason and result.
func (m *Metrics) recordExpired(e leases.Expired) {
	for _, c := range []struct {
		reason, result string
		n              int
	}{
		{"lease_lapsed", "retried", e.LapsedRetried}, {"lease_lapsed", "expired", e.LapsedExpired},
		{"attempt_timeout", "retried", e.TimeoutRetried}, {"attempt_timeout", "expired", e.TimeoutExpired},
	} {
		if c.n > 0 {
			m.leasesExpired.WithLabelValues(c.reason, c.result).Add(float64(c.n))
		}
	}
}
