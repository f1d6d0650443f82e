package dao_test

import (
	"context"
	"testing"

	"github.com/tockd/tock/dao"
	"github.com/tockd/tock/schedule"
)

const t0 = int64(1_767_225_600_000) // 2026-01-01T00:00:00Z

func newTimer(app, name string) dao.Timer {
	return dao.Timer{
		App:      app,
		Name:     name,
		Status:   dao.StatusEnabled,
		Schedule: dao.JSONSpec(schedule.Spec{Every: "1m"}),
		AnchorMS: t0,
		Callback: dao.Callback{
			URL: "http://127.0.0.1:9/hook", Method: "POST",
			Headers: map[string]string{"X-A": "b"}, Body: `{"k":1}`, TimeoutMS: 5000,
		},
		Retry: dao.RetryPolicy{MaxAttempts: 3, BackoffMS: 1000, MaxBackoffMS: 60000},
	}
}

func mustCreate(t *testing.T, s *dao.Store, tm dao.Timer) dao.Timer {
	t.Helper()
	out, existed, err := s.CreateTimer(context.Background(), tm, t0)
	if err != nil || existed {
		t.Fatalf("CreateTimer(%s/%s) = existed %v, err %v", tm.App, tm.Name, existed, err)
	}
	return out
}

func ids[T any](xs []T, id func(T) int64) []int64 {
	out := []int64{}
	for _, x := range xs {
		out = append(out, id(x))
	}
	return out
}

func timerIDs(ts []dao.Timer) []int64 { return ids(ts, func(t dao.Timer) int64 { return t.ID }) }

func execIDs(es []dao.Execution) []int64 {
	return ids(es, func(e dao.Execution) int64 { return e.ID })
}
