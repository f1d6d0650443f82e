package executor

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	tockmetrics "github.com/tockd/tock/metrics"
)

// Values of tock_store_errors_total's component label in this package.
const (
	componentExecutor = "executor"
	componentPoller   = "poller"
)

// latenessBuckets resolve lateness from half a millisecond (an occurrence fired on time) to a
// minute (a slice taken over, a re-run, a compensated occurrence).
var latenessBuckets = []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2, 5, 10, 30, 60}

// durationBuckets span a fast local callback to the longest callback timeout worth telling apart.
var durationBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// outcomes are the values of tock_executions_total's outcome label.
var outcomes = []Outcome{Succeeded, Failed, Retrying, Skipped, Unrecorded}

// metrics are the executor's and the poller's Prometheus collectors. Labels are bounded
// (outcome, component): never a timer or execution id.
type metrics struct {
	lateness    prometheus.Histogram
	duration    prometheus.Histogram
	executions  *prometheus.CounterVec
	retries     prometheus.Counter
	takeovers   prometheus.Counter
	storeErrors *prometheus.CounterVec
}

// newMetrics registers the package's counters and histograms on r (a fresh private
// registry when nil, so tests need nothing). An executor and a poller on one registry share
// them.
func newMetrics(r prometheus.Registerer) (*metrics, error) {
	if r == nil {
		r = prometheus.NewRegistry()
	}
	var err error
	m := &metrics{
		lateness: tockmetrics.Register(r, &err, prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tock_lateness_seconds",
			Help:    "Time from an occurrence's scheduled time to the start of its first callback attempt.",
			Buckets: latenessBuckets,
		})),
		duration: tockmetrics.Register(r, &err, prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tock_callback_duration_seconds",
			Help:    "Duration of callback attempts (request sent to response read, or the failure).",
			Buckets: durationBuckets,
		})),
		executions: tockmetrics.Register(r, &err, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tock_executions_total",
			Help: "Occurrences run by the executor, by outcome (succeeded, failed, retrying, skipped, unrecorded).",
		}, []string{"outcome"})),
		retries: tockmetrics.Register(r, &err, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tock_retries_total",
			Help: "Callback attempts beyond an execution's first (retries, and re-runs after a takeover or a hand-back).",
		})),
		takeovers: tockmetrics.Register(r, &err, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tock_takeovers_total",
			Help: "Running executions whose owner stopped renewing them, reset for another attempt by this instance's poller.",
		})),
		storeErrors: tockmetrics.Register(r, &err, NewStoreErrors()),
	}
	if err != nil {
		return nil, err
	}
	// Every series exists from the start, so rates and alerts see zeros, not gaps.
	for _, o := range outcomes {
		m.executions.WithLabelValues(string(o))
	}
	m.storeErrors.WithLabelValues(componentExecutor)
	m.storeErrors.WithLabelValues(componentPoller)
	return m, nil
}

// NewStoreErrors is tock_store_errors_total, for every engine component that counts the
// store (MySQL or SQLite) calls that failed. Components register it on one registry each
// with this same definition and share the series (AlreadyRegisteredError).
func NewStoreErrors() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tock_store_errors_total",
		Help: "Store (MySQL or SQLite) calls that failed, by engine component.",
	}, []string{"component"})
}

// registerPool registers the executor's pool gauges, which read e. With several executors
// on one registry, the first one's are reported.
func registerPool(r prometheus.Registerer, e *Executor) error {
	if r == nil {
		return nil
	}
	var err error
	tockmetrics.Register(r, &err, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "tock_executor_pool_size",
		Help: "Callbacks the executor runs at once at most (engine.pool_size).",
	}, func() float64 { return float64(cap(e.sem)) }))
	tockmetrics.Register(r, &err, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "tock_executor_busy",
		Help: "Occurrences being executed (holding a pool slot).",
	}, func() float64 { return float64(len(e.sem)) }))
	tockmetrics.Register(r, &err, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "tock_executor_queued",
		Help: "Occurrences submitted and waiting for a free pool slot.",
	}, func() float64 {
		// Two reads, not one snapshot: clamp the moment a task ends between them.
		return float64(max(0, e.inFlight.Load()-int64(len(e.sem))))
	}))
	return err
}

// attempted records one callback attempt of an execution: a retry unless it is the first,
// the lateness of the first unless fired by hand (its scheduled time is not a due time), and
// its duration.
func (m *metrics) attempted(occ Occurrence, attempt int, started time.Time, took time.Duration) {
	switch {
	case attempt > 1:
		m.retries.Inc()
	case !occ.Manual:
		m.lateness.Observe(max(0, started.Sub(time.UnixMilli(occ.ScheduledMS)).Seconds()))
	}
	m.duration.Observe(took.Seconds())
}

// count records how an occurrence ended.
func (m *metrics) count(o Outcome) { m.executions.WithLabelValues(string(o)).Inc() }

// storeError counts a failed store call of component; nil and a cancelled context (shutdown)
// are not errors of the store.
func (m *metrics) storeError(component string, err error) {
	if err != nil && !errors.Is(err, context.Canceled) {
		m.storeErrors.WithLabelValues(component).Inc()
	}
}
