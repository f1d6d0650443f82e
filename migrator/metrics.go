package migrator

import (
	"context"
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	tockmetrics "github.com/tockd/tock/metrics"
)

// Values of tock_occurrences_stamped_total's source label.
const (
	sourceWindow = "window" // a pass stamping the window
	sourceChange = "change" // a timer created or changed through the API (TimerChanged)
)

// metrics are the migrator's Prometheus collectors. Labels are bounded (source).
type metrics struct {
	stamped     *prometheus.CounterVec
	storeErrors prometheus.Counter
}

// newMetrics registers the migrator's collectors on r (a fresh private registry when nil).
// Collectors already registered on r with the same definitions are reused.
func newMetrics(r prometheus.Registerer) (*metrics, error) {
	if r == nil {
		r = prometheus.NewRegistry()
	}
	var err error
	stamped := tockmetrics.Register(r, &err, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tock_occurrences_stamped_total",
		Help: "Occurrences written into the Redis index, by source (window pass, timer change).",
	}, []string{"source"}))
	// The same definition as executor.NewStoreErrors (not imported: the migrator does not
	// depend on the executor); registering both shares the series.
	storeErrors := tockmetrics.Register(r, &err, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tock_store_errors_total",
		Help: "Store (MySQL or SQLite) calls that failed, by engine component.",
	}, []string{"component"}))
	if err != nil {
		return nil, err
	}
	stamped.WithLabelValues(sourceWindow)
	stamped.WithLabelValues(sourceChange)
	return &metrics{stamped: stamped, storeErrors: storeErrors.WithLabelValues("migrator")}, nil
}

func (m *metrics) stamp(source string, n int) { m.stamped.WithLabelValues(source).Add(float64(n)) }

// storeError counts a failed store call; a cancelled context (shutdown) is not one.
func (m *metrics) storeError(err error) {
	if !errors.Is(err, context.Canceled) {
		m.storeErrors.Inc()
	}
}
