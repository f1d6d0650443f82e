package api

import (
	"context"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/tockd/tock/dao"
)

// addExecution records an occurrence the way the engine does: claim, then (unless status is
// running) finish.
func addExecution(t *testing.T, s *dao.Store, tm Timer, scheduled time.Time, status string) dao.Execution {
	t.Helper()
	ctx := context.Background()
	e, claimed, err := s.ClaimExecution(ctx, dao.ClaimParams{
		TimerID: tm.ID, ScheduledMS: scheduled.UnixMilli(), TimerVersion: tm.Version,
		Owner: "node-1", NowMS: scheduled.Add(5 * time.Millisecond).UnixMilli(),
	})
	if err != nil || !claimed {
		t.Fatalf("claim: claimed %v err %v", claimed, err)
	}
	if status == dao.ExecRunning {
		return e
	}
	err = s.FinishExecution(ctx, dao.FinishParams{
		ID: e.ID, Owner: "node-1", Status: status, HTTPStatus: 200, Response: "ok",
		DurationMS: 12, NowMS: scheduled.Add(17 * time.Millisecond).UnixMilli(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if e, err = s.GetExecution(ctx, e.ID); err != nil {
		t.Fatal(err)
	}
	return e
}

func TestExecutions(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s *dao.Store) {
		t.Run("GetAndList", func(t *testing.T) {
			t.Parallel()
			b := setup(t, s)
			tm := b.create(t, timerBody(uniqueApp("exec"), "e"), http.StatusCreated)
			var all []dao.Execution
			for i := range 7 {
				status := dao.ExecSucceeded
				if i%3 == 2 {
					status = dao.ExecRunning
				}
				all = append(all, addExecution(t, s, tm, t0.Add(time.Duration(i+1)*30*time.Second), status))
			}

			r := b.do(t, http.MethodGet, "/api/v1/executions/"+itoa(all[0].ID), nil)
			r.wantStatus(t, http.StatusOK)
			var detail ExecutionDetail
			r.decode(t, &detail)
			got := detail.Execution
			if detail.Attempts == nil || len(detail.Attempts) != 0 {
				t.Fatalf("attempts = %#v, want an empty list (this execution's attempt is not recorded)", detail.Attempts)
			}
			want := Execution{
				ID: all[0].ID, TimerID: tm.ID, ScheduledAt: "2026-11-21T09:00:30.000Z", Status: "succeeded",
				Attempt: 1, StartedAt: ptr("2026-11-21T09:00:30.005Z"), FinishedAt: ptr("2026-11-21T09:00:30.017Z"),
				DurationMS: 12, HTTPStatus: ptr(200), Response: "ok", Instance: "node-1",
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("execution\n%+v\nwant\n%+v", got, want)
			}
			// A running execution has no finish time and no HTTP status: null, not zero.
			r = b.do(t, http.MethodGet, "/api/v1/executions/"+itoa(all[2].ID), nil)
			m := r.raw(t)
			if m["finished_at"] != nil || m["http_status"] != nil || m["started_at"] == nil || m["status"] != "running" {
				t.Fatalf("running execution: %s", r.body)
			}

			list := func(query string) []int64 {
				t.Helper()
				var ids []int64
				cursor := ""
				for {
					q := query + "&limit=2"
					if cursor != "" {
						q += "&cursor=" + cursor
					}
					r := b.do(t, http.MethodGet, timerPath(tm.ID, "/executions?"+q), nil)
					r.wantStatus(t, http.StatusOK)
					var page List[Execution]
					r.decode(t, &page)
					for _, e := range page.Items {
						if e.TimerID != tm.ID {
							t.Fatalf("execution of timer %d listed", e.TimerID)
						}
						ids = append(ids, e.ID)
					}
					if page.NextCursor == "" {
						return ids
					}
					cursor = page.NextCursor
				}
			}
			idsOf := func(idx ...int) []int64 {
				out := []int64{}
				for _, i := range idx {
					out = append(out, all[i].ID)
				}
				return out
			}
			for query, want := range map[string][]int64{
				"":                 idsOf(0, 1, 2, 3, 4, 5, 6),
				"status=running":   idsOf(2, 5),
				"status=succeeded": idsOf(0, 1, 3, 4, 6),
				"status=failed":    idsOf(),
				// from is inclusive, to exclusive, on the scheduled time.
				"from=2026-11-21T09:01:00Z&to=2026-11-21T09:02:30Z":                idsOf(1, 2, 3),
				"from=2026-11-21T10:01:00%2B01:00&to=2026-11-21T09:02:30.001Z":     idsOf(1, 2, 3, 4),
				"from=2026-11-21T09:01:00.0001Z":                                   idsOf(2, 3, 4, 5, 6),
				"to=2026-11-21T09:00:30.0001Z":                                     idsOf(0),
				"to=1970-01-01T00:00:00Z":                                          idsOf(),
				"to=1960-01-01T00:00:00Z":                                          idsOf(),
				"from=1960-01-01T00:00:00Z&status=running":                         idsOf(2, 5),
				"from=2026-11-21T09:03:00Z&to=2026-11-21T09:00:00Z":                idsOf(),
				"from=2026-11-21T09:01:00Z&to=2026-11-21T09:02:00Z&status=running": idsOf(2),
			} {
				if got := list(query); !reflect.DeepEqual(got, want) && !(len(got) == 0 && len(want) == 0) {
					t.Errorf("%q: %v, want %v", query, got, want)
				}
			}
		})

		t.Run("Errors", func(t *testing.T) {
			t.Parallel()
			b := setup(t, s)
			tm := b.create(t, timerBody(uniqueApp("exec"), "e"), http.StatusCreated)
			e := addExecution(t, s, tm, t0.Add(time.Second), dao.ExecFailed)
			path := timerPath(tm.ID, "/executions?")
			for _, c := range []struct{ query, code, field string }{
				{"status=done", "invalid_status", "status"},
				{"status=enabled", "invalid_status", "status"},
				{"from=yesterday", "invalid_time", "from"},
				{"to=2026-13-01T00:00:00Z", "invalid_time", "to"},
				{"to=2026-11-21", "invalid_time", "to"},
				{"limit=0", "invalid_limit", "limit"},
				{"limit=1001", "invalid_limit", "limit"},
				{"cursor=%25%25", "invalid_cursor", "cursor"},
				{"cursor=%%%", "invalid_query", ""},
				{"limit=%zz", "invalid_query", ""},
				{"cursor=x", "invalid_cursor", "cursor"},
			} {
				b.do(t, http.MethodGet, path+c.query, nil).wantError(t, http.StatusBadRequest, c.code, c.field)
			}
			for _, p := range []string{
				timerPath(999999999, "/executions"), "/api/v1/timers/abc/executions",
				"/api/v1/executions/999999999", "/api/v1/executions/0", "/api/v1/executions/x",
			} {
				b.do(t, http.MethodGet, p, nil).wantError(t, http.StatusNotFound, "not_found", "")
			}
			// A deleted timer's executions go with it.
			b.do(t, http.MethodGet, "/api/v1/executions/"+itoa(e.ID), nil).wantStatus(t, http.StatusOK)
			b.do(t, http.MethodDelete, timerPath(tm.ID), nil).wantStatus(t, http.StatusNoContent)
			b.do(t, http.MethodGet, "/api/v1/executions/"+itoa(e.ID), nil).wantError(t, http.StatusNotFound, "not_found", "")
			b.do(t, http.MethodGet, timerPath(tm.ID, "/executions"), nil).wantError(t, http.StatusNotFound, "not_found", "")
		})
	})
}
