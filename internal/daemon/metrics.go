package daemon

import (
	"sync/atomic"
	"time"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promauto"
	dto "github.com/prometheus/client_model/go"
)

// Metrics are the daemon's Prometheus metrics. Names are stable: alerts
// and dashboards depend on them (docs/operations.md).
type Metrics struct {
	registry          *prometheus.Registry
	eventsDispatched  prometheus.Counter
	dispatchTakes     *prometheus.CounterVec
	dispatchDelay     prometheus.Histogram
	edgesResolved     *prometheus.CounterVec
	decisions         *prometheus.CounterVec
	siblingsCancelled prometheus.Counter
	leasesExpired     *prometheus.CounterVec
	leaseTimers       *prometheus.CounterVec
	leaseChecks       prometheus.Counter
	deadlinesExpired  prometheus.Counter
	sweepFound        *prometheus.CounterVec
	sweepErrors       *prometheus.CounterVec
	sweepFailing      prometheus.Gauge
	reconnects        prometheus.Counter
	droppedHints      *prometheus.CounterVec
	executions        *prometheus.GaugeVec
	laneDue           *prometheus.GaugeVec
	laneLag           *prometheus.GaugeVec
	laneStatsAge      prometheus.Gauge
	readyNotified     prometheus.Counter
	outboxDeleted     *prometheus.CounterVec
	idleConsumers     prometheus.Gauge
	retentionDeleted  *prometheus.CounterVec
	scheduleTicks     prometheus.Counter
	eventsFired       prometheus.Counter
	linked            *prometheus.CounterVec
	consumerBehind    *prometheus.GaugeVec
	consumerLag       *prometheus.GaugeVec
	slotRetained      *prometheus.GaugeVec
	statsRefreshed    prometheus.Counter
	// readyFn is the daemon's Ready, read by ffd_daemon_ready.
	readyFn atomic.Pointer[func() bool]
}

// NewMetrics registers the metrics in a registry of their own.
func NewMetrics() *Metrics {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mk := metricMaker{with: promauto.With(r)} // every metric is registered as it is made
	m := &Metrics{registry: r}
	m.cascadeMetrics(mk)
	m.leaseMetrics(mk)
	m.sampledMetrics(mk)
	mk.with.NewGaugeFunc(prometheus.GaugeOpts{Name: "ffd_daemon_ready",
		Help: "1 while the daemon is ready (schema checked, LISTEN up, first sweep done, database answering, no sweep step failing), else 0."},
		func() float64 {
			if f := m.readyFn.Load(); f != nil && (*f)() {
				return 1
			}
			return 0
		})
	m.zeroLabels()
	return m
}

// metricMaker makes metrics registered with one registry.
type metricMaker struct{ with promauto.Factory }

func (mk metricMaker) counter(name, help string) prometheus.Counter {
	return mk.with.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

func (mk metricMaker) counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return mk.with.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

func (mk metricMaker) gauge(name, help string) prometheus.Gauge {
	return mk.with.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
}

func (mk metricMaker) gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return mk.with.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
}

// cascadeMetrics: dispatch, edges, joins and sibling cancels.
func (m *Metrics) cascadeMetrics(mk metricMaker) {
	m.eventsDispatched = mk.counter("ffd_events_dispatched_total",
		"Completion events dispatched by this daemon.")
	m.dispatchTakes = mk.counterVec("ffd_dispatch_takes_total",
		"Notified dispatch transactions, by result: took (it dispatched events) or empty (every event was held or done by another daemon, or by the sweep).",
		"result")
	m.dispatchDelay = mk.with.NewHistogram(prometheus.HistogramOpts{Name: "ffd_dispatch_delay_seconds",
		Help:    "Age of a completion event when dispatched: from its insert to its dispatch (database clock).",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}})
	m.edgesResolved = mk.counterVec("ffd_edges_resolved_total",
		"Edges resolved, by upstream outcome class (success, failed, skipped).",
		"outcome")
	m.decisions = mk.counterVec("ffd_group_decisions_total",
		"Edge groups decided, by decision (satisfied, impossible).",
		"decision")
	m.siblingsCancelled = mk.counter("ffd_siblings_cancelled_total",
		"Sibling upstreams cancelled after a cancel_remaining group was satisfied.")
}

// leaseMetrics: expiries, timers, deadlines, the sweep and the listener.
func (m *Metrics) leaseMetrics(mk metricMaker) {
	m.leasesExpired = mk.counterVec("ffd_leases_expired_total",
		"Running attempts ended for lack of time, by reason (lease_lapsed, attempt_timeout) and result (retried, expired).",
		"reason", "result")
	m.leaseTimers = mk.counterVec("ffd_lease_timers_total",
		"Lease expiry timers that came due, by outcome: checked (re-checked under the row lock, in one statement with the others due with it).",
		"outcome")
	m.leaseChecks = mk.counter("ffd_lease_checks_total",
		"Statements the timeout worker ran to check lease timers that came due (one for all those due together).")
	m.deadlinesExpired = mk.counter("ffd_deadlines_expired_total",
		"Executions expired because their deadline passed.")
	m.sweepFound = mk.counterVec("ffd_sweep_found_total",
		"Work the fallback sweep found that notifications should have delivered, by kind.",
		"kind")
	m.sweepErrors = mk.counterVec("ffd_sweep_errors_total",
		"Failed steps of the fallback sweep, by step.",
		"step")
	m.sweepFailing = mk.gauge("ffd_sweep_failing_steps",
		"Sweep steps that have failed three sweeps in a row; the daemon is not ready while it is above 0.")
	m.reconnects = mk.counter("ffd_listener_reconnects_total",
		"Reconnects of the LISTEN connection.")
	m.droppedHints = mk.counterVec("ffd_dropped_hints_total",
		"Notifications dropped because a worker queue was full (the sweep catches up), by queue.",
		"queue")
}

// sampledMetrics: what the daemon samples and its housekeeping.
func (m *Metrics) sampledMetrics(mk metricMaker) {
	m.executions = mk.gaugeVec("ffd_executions",
		"Live executions by lane and state, from the lane statistics one daemon samples periodically.",
		"lane", "state")
	m.laneDue = mk.gaugeVec("ffd_lane_due_executions",
		"Pending executions due now (not delayed) by lane, from the sampled lane statistics.",
		"lane")
	m.laneLag = mk.gaugeVec("ffd_lane_lag_seconds",
		"How long each lane's oldest due execution had waited when the lane statistics were sampled (0: none due).",
		"lane")
	m.laneStatsAge = mk.gauge("ffd_lane_stats_age_seconds",
		"Age of the lane statistics this daemon last read (a daemon samples them every sample interval).")
	m.readyNotified = mk.counter("ffd_ready_notified_total",
		"ff_ready notifications sent for lanes whose delayed executions came due.")
	m.outboxDeleted = mk.counterVec("ffd_outbox_deleted_total",
		"Outbox events deleted by retention, by stream.",
		"stream")
	m.idleConsumers = mk.gauge("ffd_outbox_idle_consumers",
		"Named consumers idle beyond the limit while events wait for them.")
	m.scheduleTicks = mk.counter("ffd_schedule_ticks_total",
		"Schedule ticks fired by this daemon (each created an execution or submitted a flow).")
	m.eventsFired = mk.counter("ffd_events_fired_total",
		"Published events this daemon fired (each started what its triggers ask for).")
	m.linked = mk.counterVec("ffd_links_total",
		"Sub-flow and compensation steps this daemon took: a sub-flow started or ended, a compensation flow started.",
		"action")
	m.consumerBehind = mk.gaugeVec("ffd_outbox_consumer_behind_events",
		"Events a named consumer has not read yet (counted up to 100,000 per stream), sampled periodically.",
		"consumer")
	m.consumerLag = mk.gaugeVec("ffd_outbox_consumer_lag_seconds",
		"Age of the oldest event a named consumer has not read (0 when it is caught up), sampled periodically.",
		"consumer")
	m.slotRetained = mk.gaugeVec("ffd_wal_slot_retained_bytes",
		"WAL a logical replication slot of this database holds back, sampled periodically.",
		"slot")
	m.statsRefreshed = mk.counter("ffd_statistics_refreshed_total",
		"Tables this daemon analyzed because their planner statistics said they held under a quarter of their rows.")
	m.retentionDeleted = mk.counterVec("ffd_retention_deleted_total",
		"Finished solo executions, finished flows (each with its members, edges and groups) and fired events deleted by retention, by kind.",
		"kind")
}

// readyBy makes ffd_daemon_ready report ready.
func (m *Metrics) readyBy(ready func() bool) { m.readyFn.Store(&ready) }

// zeroLabels creates every labelled series whose label values are known
// in advance, at 0: a fresh daemon then exposes every documented metric,
// so that dashboards and rate() alerts see a series before its first
// event instead of "no data". Only the lane gauges (ffd_executions,
// ffd_lane_due_executions, ffd_lane_lag_seconds), whose lanes are the
// application's, start empty.
func (m *Metrics) zeroLabels() {
	for _, v := range []struct {
		vec    *prometheus.CounterVec
		labels [][]string
	}{
		{m.dispatchTakes, [][]string{{"took"}, {"empty"}}},
		{m.edgesResolved, [][]string{{"success"}, {"failed"}, {"skipped"}}},
		{m.decisions, [][]string{{string(ffdtype.DecisionSatisfied)}, {string(ffdtype.DecisionImpossible)}}},
		{m.leasesExpired, [][]string{{"lease_lapsed", "retried"}, {"lease_lapsed", "expired"}, {"attempt_timeout", "retried"}, {"attempt_timeout", "expired"}}},
		{m.leaseTimers, [][]string{{"checked"}}},
		{m.sweepFound, [][]string{{"completion_event"}, {"cancel_group"}, {"lapsed_lease"}, {"deadline"}, {"signal"}}},
		{m.sweepErrors, [][]string{{stepDispatch}, {stepCancelSiblings}, {stepLapsedLeases}, {stepDeadlines}, {stepDueLanes}, {stepSignals}, {stepIdleKeys}}},
		{m.droppedHints, [][]string{{"timeout"}}},
		{m.outboxDeleted, [][]string{{"completion"}, {"lease"}}},
		{m.retentionDeleted, [][]string{{"execution"}, {"flow"}, {"event"}}},
		{m.linked, [][]string{{linkStarted}, {linkEnded}, {linkCompensated}}},
	} {
		for _, l := range v.labels {
			v.vec.WithLabelValues(l...)
		}
	}
}

// took counts one notified dispatch transaction by whether it took any
// event.
func (m *Metrics) took(any bool) {
	result := "empty"
	if any {
		result = "took"
	}
	m.dispatchTakes.WithLabelValues(result).Inc()
}

// DispatchTakes reads ffd_dispatch_takes_total: notified dispatch
// transactions that took events and that found none left to take.
func (m *Metrics) DispatchTakes() (took, empty float64) {
	read := func(result string) float64 {
		var d dto.Metric
		if err := m.dispatchTakes.WithLabelValues(result).Write(&d); err != nil {
			return 0
		}
		return d.GetCounter().GetValue()
	}
	return read("took"), read("empty")
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
func (m *Metrics) Resolved(by map[string]int, dec map[ffdtype.Decision]int) {
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
