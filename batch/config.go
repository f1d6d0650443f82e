package batch

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
)

// Config tunes the batch runner. The zero value of a field means its default; WithDefaults
// fills them in and Validate rejects what cannot work.
type Config struct {
	// QueueSize bounds the in-memory queue of tasks waiting for a worker. Default: 1000.
	QueueSize int `yaml:"queue_size"`
	// Workers is the fixed number of worker goroutines. Default: 32.
	Workers int `yaml:"workers"`
	// ScanInterval is how often unfinished batches are maintained: tasks whose runner died
	// are taken back, statuses aggregated and pending tasks re-dispatched. Default: 20s.
	ScanInterval time.Duration `yaml:"scan_interval"`
	// RefreshInterval is how often the batches this instance worked on get their status
	// aggregated between scans. Default: 1s.
	RefreshInterval time.Duration `yaml:"refresh_interval"`
	// StalledScans restarts the dispatcher and the worker pool when the queue held tasks and
	// no worker took one for this many consecutive scans. Default: 3.
	StalledScans int `yaml:"stalled_scans"`
	// MaxRetries is how many times a task that timed out or failed transiently runs again
	// before it fails. Default: 2.
	MaxRetries int `yaml:"max_retries"`
	// LeaseGrace is added to a handler's timeout to form a claimed task's deadline; a running
	// task not released by then is taken back by any instance. Default: 10s.
	LeaseGrace time.Duration `yaml:"lease_grace"`
	// MaxTargets bounds the timers of one batch. Default: 100000.
	MaxTargets int `yaml:"max_targets"`
	// Timeouts overrides the handlers' own timeouts, by operation (e.g. {"trigger": "30s"}).
	// Default: none.
	Timeouts map[string]time.Duration `yaml:"timeouts"`
}

// Defaults of Config.
const (
	DefaultQueueSize       = 1000
	DefaultWorkers         = 32
	DefaultScanInterval    = 20 * time.Second
	DefaultRefreshInterval = time.Second
	DefaultStalledScans    = 3
	DefaultMaxRetries      = 2
	DefaultLeaseGrace      = 10 * time.Second
	DefaultMaxTargets      = 100_000
)

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	c.QueueSize = cmp.Or(c.QueueSize, DefaultQueueSize)
	c.Workers = cmp.Or(c.Workers, DefaultWorkers)
	c.ScanInterval = cmp.Or(c.ScanInterval, DefaultScanInterval)
	c.RefreshInterval = cmp.Or(c.RefreshInterval, DefaultRefreshInterval)
	c.StalledScans = cmp.Or(c.StalledScans, DefaultStalledScans)
	c.MaxRetries = cmp.Or(c.MaxRetries, DefaultMaxRetries)
	c.LeaseGrace = cmp.Or(c.LeaseGrace, DefaultLeaseGrace)
	c.MaxTargets = cmp.Or(c.MaxTargets, DefaultMaxTargets)
	return c
}

// Validate reports every field out of range (after WithDefaults).
func (c Config) Validate() error {
	var errs []error
	positive := func(name string, v int) {
		if v < 1 {
			errs = append(errs, fmt.Errorf("batch.%s must be at least 1, got %d", name, v))
		}
	}
	positive("queue_size", c.QueueSize)
	positive("workers", c.Workers)
	positive("stalled_scans", c.StalledScans)
	positive("max_targets", c.MaxTargets)
	if c.MaxRetries < 0 {
		errs = append(errs, fmt.Errorf("batch.max_retries must not be negative, got %d", c.MaxRetries))
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"scan_interval", c.ScanInterval}, {"refresh_interval", c.RefreshInterval}, {"lease_grace", c.LeaseGrace}} {
		if f.d <= 0 {
			errs = append(errs, fmt.Errorf("batch.%s must be positive, got %s", f.name, f.d))
		}
	}
	for _, op := range slices.Sorted(maps.Keys(c.Timeouts)) {
		if d := c.Timeouts[op]; d <= 0 {
			errs = append(errs, fmt.Errorf("batch.timeouts.%s must be positive, got %s", op, d))
		}
	}
	return errors.Join(errs...)
}
