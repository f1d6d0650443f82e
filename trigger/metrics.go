package trigger

import (
	"github.com/prometheus/client_golang/prometheus"

	tockmetrics "github.com/tockd/tock/metrics"
)

// Values of tock_slice_runs_total's result label.
const (
	resultComplete = "complete" // every occurrence recorded: the slice is done
	resultDeadline = "deadline" // the lease ran out or was lost first: the slice is re-run
	resultStopped  = "stopped"  // the scheduler stopped: the slice is released for another instance
)

// Metrics are the triggers' Prometheus collectors. A trigger lives for one slice, so they
// are built once (by the scheduler) and shared by every trigger through Config.Metrics; a
// nil *Metrics counts nothing.
type Metrics struct {
	runs         *prometheus.CounterVec
	fired        prometheus.Counter
	submitErrors prometheus.Counter
}

// NewMetrics registers the triggers' collectors on r (a fresh private registry when nil).
// Collectors already registered on r with the same definitions are reused.
func NewMetrics(r prometheus.Registerer) (*Metrics, error) {
	if r == nil {
		r = prometheus.NewRegistry()
	}
	var err error
	m := &Metrics{
		runs: tockmetrics.Register(r, &err, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tock_slice_runs_total",
			Help: "Trigger runs of a slice, by how they ended (complete, deadline, stopped).",
		}, []string{"result"})),
		fired: tockmetrics.Register(r, &err, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tock_occurrences_fired_total",
			Help: "Due occurrences the triggers handed to the executor (a re-run or an unrecorded one counts again).",
		})),
		submitErrors: tockmetrics.Register(r, &err, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tock_trigger_submit_errors_total",
			Help: "Occurrences the executor refused to take; they stay queued until the slice's next read.",
		})),
	}
	if err != nil {
		return nil, err
	}
	for _, r := range []string{resultComplete, resultDeadline, resultStopped} {
		m.runs.WithLabelValues(r)
	}
	return m, nil
}

func (m *Metrics) ran(complete bool, why string) {
	if m == nil {
		return
	}
	result := resultDeadline
	switch {
	case complete:
		result = resultComplete
	case why == "stopped":
		result = resultStopped
	}
	m.runs.WithLabelValues(result).Inc()
}

func (m *Metrics) submitted() {
	if m != nil {
		m.fired.Inc()
	}
}

func (m *Metrics) refused() {
	if m != nil {
		m.submitErrors.Inc()
	}
}
