package test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// TestBatchTriggerFiresOnce: a trigger batch fires every enabled timer of its target once,
// now, outside its schedule: a daily cron, a one-shot due in an hour (it stays enabled and
// fires again at its time) and a timer whose first manual call fails (retried by its
// policy). Disabled timers fail their task. Each callback carries Tock-Manual: true, and the
// executions are listed as manual.
func TestBatchTriggerFiresOnce(t *testing.T) {
	for _, b := range []backend{embeddedBackend(), realBackend(t)} {
		t.Run(b.name, func(t *testing.T) {
			type call struct {
				key, manual, attempt string
				at                   time.Time
			}
			var mu sync.Mutex
			calls := map[string][]call{} // by path
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				defer mu.Unlock()
				calls[r.URL.Path] = append(calls[r.URL.Path], call{key: r.Header.Get("Idempotency-Key"),
					manual: r.Header.Get("Tock-Manual"), attempt: r.Header.Get("Tock-Attempt"), at: time.Now()})
				if r.URL.Path == "/flaky" && len(calls[r.URL.Path]) == 1 {
					w.WriteHeader(http.StatusServiceUnavailable)
					return
				}
				w.WriteHeader(http.StatusNoContent)
			}))
			defer srv.Close()
			c := startApp(t, b.config(t, "trig-1"))
			app := uniqueApp("trig")
			create := func(name string, sched map[string]any, enabled bool) timerJSON {
				var tm timerJSON
				if code := c.do("POST", "/api/v1/timers", map[string]any{"app": app, "name": name, "schedule": sched,
					"callback": map[string]any{"url": srv.URL + "/" + name}, "enabled": enabled,
					"retry": map[string]any{"max_attempts": 3, "backoff": "100ms"}}, &tm); code != http.StatusCreated {
					t.Fatalf("create %s: %d", name, code)
				}
				return tm
			}
			daily := create("daily", map[string]any{"cron": "0 9 1 1 *", "timezone": "Europe/Berlin"}, true)
			later := create("later", map[string]any{"in": "1h"}, true)
			flaky := create("flaky", map[string]any{"every": "24h"}, true)
			off := create("off", map[string]any{"every": "1s"}, false)

			var bj batchJSON
			if code := c.do("POST", "/api/v1/batches", map[string]any{"operation": "trigger", "target": map[string]any{"app": app}}, &bj); code != http.StatusAccepted {
				t.Fatalf("create trigger batch: %d", code)
			}
			started := time.Now()
			waitUntil(t, time.Now().Add(60*time.Second), "the trigger batch to finish", func() bool {
				c.do("GET", fmt.Sprintf("/api/v1/batches/%d", bj.ID), nil, &bj)
				return bj.Status == "partial_fail"
			})
			if bj.Counts["success"] != 3 || bj.Counts["fail"] != 1 {
				t.Fatalf("counts %v, want 3 success (enabled) and 1 fail (disabled)", bj.Counts)
			}
			waitUntil(t, time.Now().Add(60*time.Second), "every manual execution to succeed", func() bool {
				for _, tm := range []timerJSON{daily, later, flaky} {
					es := c.executions(tm.ID)
					if len(es) != 1 || es[0].Status != "succeeded" {
						return false
					}
				}
				return true
			})
			mu.Lock()
			defer mu.Unlock()
			for path, want := range map[string]int{"/daily": 1, "/later": 1, "/flaky": 2, "/off": 0} {
				got := calls[path]
				if len(got) != want {
					t.Fatalf("%s called %d times, want %d: %+v", path, len(got), want, got)
				}
				for i, cl := range got {
					if cl.manual != "true" || cl.attempt != fmt.Sprint(i+1) || cl.key != got[0].key {
						t.Fatalf("%s call %d: %+v", path, i, cl)
					}
				}
				if want > 0 {
					t.Logf("%s: first call %v after the batch was created", path, got[0].at.Sub(started).Round(time.Millisecond))
				}
			}
			var lt timerJSON
			c.do("GET", fmt.Sprintf("/api/v1/timers/%d", later.ID), nil, &lt)
			if lt.Status != "enabled" || lt.NextFireAt == nil || *lt.NextFireAt != *later.NextFireAt {
				t.Fatalf("the one-shot fired by hand must keep its own occurrence: %+v", lt)
			}
			var ex struct {
				Manual   bool `json:"manual"`
				Attempts []struct {
					HTTPStatus *int `json:"http_status"`
				} `json:"attempts"`
			}
			c.do("GET", fmt.Sprintf("/api/v1/executions/%d", c.executions(flaky.ID)[0].ID), nil, &ex)
			if !ex.Manual || len(ex.Attempts) != 2 {
				t.Fatalf("flaky execution %+v: want manual with 2 attempts", ex)
			}
			if es := c.executions(off.ID); len(es) != 0 {
				t.Fatalf("disabled timer executed: %+v", es)
			}
		})
	}
}
