package compensator

import (
	"context"
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	tockmetrics "github.com/tockd/tock/metrics"

	"github.com/tockd/tock/executor"
)

// componentCompensator is the compensator's tock_store_errors_total component.
const componentCompensator = "compensator"

// metrics are the compensator's Prometheus collectors. Labels are bounded (kind, result).
type metrics struct {
	compensations prometheus.Counter
	missed        prometheus.Counter
	passes        *prometheus.CounterVec
	storeErrors   prometheus.Counter
}

// newMetrics registers the compensator's collectors on r (a fresh private registry when
// nil). Collectors already registered on r with the same definitions are reused.
func newMetrics(r prometheus.Registerer) (*metrics, error) {
	if r == nil {
		r = prometheus.NewRegistry()
	}
	var err error
	m := &metrics{
		compensations: tockmetrics.Register(r, &err, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tock_compensations_total",
			Help: "Occurrences the compensator handed to the executor: stuck executions and missing occurrences re-driven.",
		})),
		missed: tockmetrics.Register(r, &err, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tock_missed_total",
			Help: "Missing occurrences the compensator recorded missed instead of firing (misfire policy, or older than the catch-up window).",
		})),
		passes: tockmetrics.Register(r, &err, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tock_compensation_passes_total",
			Help: "Compensation passes by kind (catch_up, scheduled, manual) and result (ok, error).",
		}, []string{"kind", "result"})),
	}
	// The one definition shared with the executor and the poller.
	storeErrors := tockmetrics.Register(r, &err, executor.NewStoreErrors())
	if err != nil {
		return nil, err
	}
	m.storeErrors = storeErrors.WithLabelValues(componentCompensator)
	for _, k := range []string{KindCatchUp, KindScheduled, KindManual} {
		m.passes.WithLabelValues(k, "ok")
		m.passes.WithLabelValues(k, "error")
	}
	return m, nil
}

// pass counts a pass and, when it failed on the store, a store error: a stop (a cancelled
// context, the executor stopping) is neither.
func (m *metrics) pass(kind string, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.passes.WithLabelValues(kind, result).Inc()
	if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, executor.ErrStopped) {
		m.storeErrors.Inc()
	}
}
