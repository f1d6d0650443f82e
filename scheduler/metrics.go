package scheduler

import (
	"github.com/prometheus/client_golang/prometheus"

	tockmetrics "github.com/tockd/tock/metrics"

	"github.com/tockd/tock/trigger"
)

// Values of the scheduler metrics' labels.
const (
	extendRenew    = "renew"    // the lease renewed while the trigger runs
	extendComplete = "complete" // a completed slice's lock extended past the next minute
	opRenew        = "renew"
	opExtend       = "extend"
	opRelease      = "release"
)

// metrics are the scheduler's Prometheus collectors, plus the triggers' it hands to each
// trigger. Labels are bounded: never a slice or bucket.
type metrics struct {
	taken      prometheus.Counter
	extended   *prometheus.CounterVec
	lost       prometheus.Counter
	lockErrors *prometheus.CounterVec
	triggers   *trigger.Metrics
}

// newMetrics registers the scheduler's collectors on r (a fresh private registry when nil);
// running reports the slices being worked. With several schedulers on one registry the
// counters are shared and the first one's gauge is reported.
func newMetrics(r prometheus.Registerer, running func() int) (*metrics, error) {
	if r == nil {
		r = prometheus.NewRegistry()
	}
	var err error
	m := &metrics{
		taken: tockmetrics.Register(r, &err, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tock_slice_locks_taken_total",
			Help: "Slice leases this instance acquired (each starts a trigger run).",
		})),
		extended: tockmetrics.Register(r, &err, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tock_slice_locks_extended_total",
			Help: "Slice leases extended: renewed while a trigger runs (renew), or past the next minute once the slice completed (complete).",
		}, []string{"reason"})),
		lost: tockmetrics.Register(r, &err, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tock_slice_locks_lost_total",
			Help: "Slice leases found expired or owned by another instance when renewing or completing.",
		})),
		lockErrors: tockmetrics.Register(r, &err, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tock_slice_lock_errors_total",
			Help: "Redis errors renewing, extending or releasing a slice lease, by operation.",
		}, []string{"op"})),
	}
	tockmetrics.Register(r, &err, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "tock_slices_running",
		Help: "Slices this instance's triggers are working.",
	}, func() float64 { return float64(running()) }))
	if err != nil {
		return nil, err
	}
	if m.triggers, err = trigger.NewMetrics(r); err != nil {
		return nil, err
	}
	for _, r := range []string{extendRenew, extendComplete} {
		m.extended.WithLabelValues(r)
	}
	for _, op := range []string{opRenew, opExtend, opRelease} {
		m.lockErrors.WithLabelValues(op)
	}
	return m, nil
}

func (m *metrics) lockError(op string) { m.lockErrors.WithLabelValues(op).Inc() }

func (m *metrics) extend(reason string) { m.extended.WithLabelValues(reason).Inc() }
