package batch

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Task outcomes, the values of the outcome label.
const (
	outcomeSuccess = "success" // done (or already in the wanted state)
	outcomeFail    = "fail"    // failed for good
	outcomeRetry   = "retry"   // failed or timed out, back to pending
	outcomeLost    = "lost"    // claimed or taken back by another runner first
	outcomeAborted = "aborted" // the runner stopped abruptly; the claim is left to a take-back
)

// metrics are the batch runner's Prometheus collectors. Labels are bounded (operation, phase,
// outcome, status): the seed labeled by task and batch id, one series per task forever.
type metrics struct {
	queueLength   prometheus.Gauge
	queueCapacity prometheus.Gauge
	queueUsage    prometheus.Gauge
	queueRejected prometheus.Counter
	workers       prometheus.Gauge
	busyWorkers   prometheus.Gauge
	taskDuration  *prometheus.HistogramVec
	tasks         *prometheus.CounterVec
	statusChanges *prometheus.CounterVec
	restarts      prometheus.Counter
	takenBack     prometheus.Counter
}

func newMetrics(r prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		queueLength: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tock_batch_queue_length", Help: "Batch tasks waiting in the queue for a worker.",
		}),
		queueCapacity: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tock_batch_queue_capacity", Help: "Capacity of the batch task queue.",
		}),
		queueUsage: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tock_batch_queue_usage_ratio", Help: "Queue length over capacity, 0 to 1.",
		}),
		queueRejected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tock_batch_queue_full_total", Help: "Dispatch passes that stopped because the queue was full.",
		}),
		workers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tock_batch_workers", Help: "Batch worker goroutines.",
		}),
		busyWorkers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tock_batch_workers_busy", Help: "Batch workers running a task.",
		}),
		taskDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tock_batch_task_duration_seconds",
			Help:    "Time from a task's claim to its outcome.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"operation", "phase"}),
		tasks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tock_batch_tasks_total", Help: "Task runs by outcome (success, fail, retry, lost, aborted).",
		}, []string{"operation", "phase", "outcome"}),
		statusChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tock_batch_status_changes_total", Help: "Batches entering each status.",
		}, []string{"status"}),
		restarts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tock_batch_dispatcher_restarts_total", Help: "Restarts of the dispatcher and worker pool after the queue stopped draining.",
		}),
		takenBack: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tock_batch_tasks_taken_back_total", Help: "Running tasks returned to pending (or failed) because their runner died or overran.",
		}),
	}
	var err error
	reg := func(c prometheus.Collector) prometheus.Collector {
		if err != nil {
			return c
		}
		if e := r.Register(c); e != nil {
			// Several runners in one process (tests, or two stores) share one set of series.
			var are prometheus.AlreadyRegisteredError
			if errors.As(e, &are) {
				return are.ExistingCollector
			}
			err = fmt.Errorf("batch: register metrics: %w", e)
		}
		return c
	}
	m.queueLength = reg(m.queueLength).(prometheus.Gauge)
	m.queueCapacity = reg(m.queueCapacity).(prometheus.Gauge)
	m.queueUsage = reg(m.queueUsage).(prometheus.Gauge)
	m.queueRejected = reg(m.queueRejected).(prometheus.Counter)
	m.workers = reg(m.workers).(prometheus.Gauge)
	m.busyWorkers = reg(m.busyWorkers).(prometheus.Gauge)
	m.taskDuration = reg(m.taskDuration).(*prometheus.HistogramVec)
	m.tasks = reg(m.tasks).(*prometheus.CounterVec)
	m.statusChanges = reg(m.statusChanges).(*prometheus.CounterVec)
	m.restarts = reg(m.restarts).(prometheus.Counter)
	m.takenBack = reg(m.takenBack).(prometheus.Counter)
	return m, err
}

// observeQueue publishes the queue's length and usage.
func (m *metrics) observeQueue(q *queue) {
	n, c := q.len(), q.cap()
	m.queueLength.Set(float64(n))
	m.queueCapacity.Set(float64(c))
	// Floating point: the seed divided two ints, so its usage was always 0 or 100.
	m.queueUsage.Set(float64(n) / float64(c))
}
