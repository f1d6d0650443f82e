// Package metrics holds what tock's components share to expose Prometheus metrics: each
// component defines its own collectors (executor/metrics.go, scheduler/metrics.go, ...) and
// registers them through Register on the registry the app serves at /metrics.
package metrics

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers c on r and returns it, or the collector already registered under the
// same descriptors (several components or engines in one process share one set of series,
// e.g. tock_store_errors_total). The first other failure is kept in *errp and later calls
// do nothing, so a constructor registers all its collectors and checks one error.
func Register[C prometheus.Collector](r prometheus.Registerer, errp *error, c C) C {
	if *errp != nil {
		return c
	}
	if err := r.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		*errp = fmt.Errorf("register metrics: %w", err)
	}
	return c
}
