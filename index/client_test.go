package index_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/tockd/tock/index"
	"github.com/tockd/tock/index/indextest"
)

func TestInstrumentCountsRedisErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := indextest.Miniredis(t, nil)
	reg := prometheus.NewRegistry()
	if err := index.Instrument(r.Client, reg); err != nil {
		t.Fatal(err)
	}
	// A second client on the same registry shares the counter.
	other := redis.NewClient(&redis.Options{Addr: r.Mini.Addr()})
	defer other.Close()
	if err := index.Instrument(other, reg); err != nil {
		t.Fatalf("instrument a second client: %v", err)
	}
	key := r.Prefix + "k"

	// Not errors: a miss, and a script's first EVALSHA answered NOSCRIPT.
	if err := r.Client.Get(ctx, key).Err(); err != redis.Nil {
		t.Fatalf("get missing key: %v", err)
	}
	if err := redis.NewScript(`return 1`).Run(ctx, r.Client, []string{key}).Err(); err != nil {
		t.Fatal(err)
	}
	// Errors: INCR of a string, and a pipeline with such a command in it.
	if err := r.Client.Set(ctx, key, "not a number", 0).Err(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []redis.UniversalClient{r.Client, other} {
		if err := c.Incr(ctx, key).Err(); err == nil {
			t.Fatal("INCR of a string succeeded")
		}
	}
	pipe := r.Client.Pipeline()
	pipe.Get(ctx, key)
	pipe.Incr(ctx, key)
	if _, err := pipe.Exec(ctx); err == nil {
		t.Fatal("pipeline with a failing INCR succeeded")
	}

	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "tock_redis_errors_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			got[label(m, "command")] += m.GetCounter().GetValue()
		}
	}
	if len(got) != 2 || got["incr"] != 2 || got["pipeline"] != 1 {
		t.Fatalf("redis errors = %v, want incr 2 (one per client) and pipeline 1", got)
	}
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
