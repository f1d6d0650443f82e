// Package metricstest reads metrics back from a Prometheus registry in tests.
package metricstest

import (
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Value sums the samples of name in g that carry labels (name, value, ...): a counter's or
// gauge's value, a histogram's sample count; sum is a histogram's sample sum. It fails the
// test when no such series exists.
func Value(t testing.TB, g prometheus.Gatherer, name string, labels ...string) (v, sum float64) {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !HasLabels(m, labels) {
				continue
			}
			found = true
			switch {
			case m.Counter != nil:
				v += m.GetCounter().GetValue()
			case m.Gauge != nil:
				v += m.GetGauge().GetValue()
			case m.Histogram != nil:
				v += float64(m.GetHistogram().GetSampleCount())
				sum += m.GetHistogram().GetSampleSum()
			}
		}
	}
	if !found {
		t.Fatalf("no metric %s with labels %v", name, labels)
	}
	return v, sum
}

// HasLabels reports whether m carries every (name, value) pair of labels.
func HasLabels(m *dto.Metric, labels []string) bool {
	for i := 0; i+1 < len(labels); i += 2 {
		if !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool {
			return l.GetName() == labels[i] && l.GetValue() == labels[i+1]
		}) {
			return false
		}
	}
	return true
}
