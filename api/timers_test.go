package api

import (
	"context"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tockd/tock/dao"
	"github.com/tockd/tock/schedule"
)

func TestCreateTimer(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s *dao.Store) {
		t.Run("FillsDefaults", func(t *testing.T) {
			t.Parallel()
			b := setup(t, s)
			app := uniqueApp("defaults")
			got := b.create(t, timerBody(app, "reminder"), http.StatusCreated)
			want := Timer{
				ID:       got.ID,
				App:      app,
				Name:     "reminder",
				Schedule: schedule.Spec{Every: "30s"},
				Callback: Callback{URL: "http://127.0.0.1:9/hook", Method: "POST", Headers: map[string]string{}, Timeout: "5s"},
				Retry:    Retry{MaxAttempts: 3, Backoff: "1s", MaxBackoff: "1m0s"},
				Misfire:  "fire_all",
				Enabled:  true,
				Status:   "enabled",
				Version:  1,
				// The fake clock's now, in the API's one time format.
				CreatedAt:  "2026-11-21T09:00:00.000Z",
				UpdatedAt:  "2026-11-21T09:00:00.000Z",
				NextFireAt: ptr("2026-11-21T09:00:30.000Z"),
			}
			if got.ID < 1 || !reflect.DeepEqual(got, want) {
				t.Fatalf("created\n%+v\nwant\n%+v", got, want)
			}
			// The stored row has the anchor at now and durations in milliseconds.
			row, err := s.GetTimer(context.Background(), got.ID)
			if err != nil {
				t.Fatal(err)
			}
			if row.AnchorMS != t0.UnixMilli() || row.Callback.TimeoutMS != 5000 || row.Retry != (dao.RetryPolicy{MaxAttempts: 3, BackoffMS: 1000, MaxBackoffMS: 60000}) || row.RequestHash != "" {
				t.Fatalf("stored %+v", row)
			}
			// request_id is omitted when not given.
			r := b.do(t, http.MethodGet, timerPath(got.ID), nil)
			if _, ok := r.raw(t)["request_id"]; ok {
				t.Errorf("request_id present: %s", r.body)
			}
			calls := b.hook.take()
			if len(calls) != 1 || calls[0].before != nil || calls[0].after.ID != got.ID || calls[0].after.Status != dao.StatusEnabled {
				t.Fatalf("hook calls %+v, want one with before nil and the new timer", calls)
			}
		})

		t.Run("StoresEveryField", func(t *testing.T) {
			t.Parallel()
			b := setup(t, s)
			app := uniqueApp("full")
			body := map[string]any{
				"app":  app,
				"name": "Nightly report ⏰",
				"schedule": map[string]any{
					"cron": "0 9 * * *", "timezone": "Europe/Berlin",
				},
				"callback": map[string]any{
					"url": "https://example.com/hook?x=1", "method": "put",
					"headers": map[string]any{"X-Token": "s3cret", "Content-Type": "application/json"},
					"body":    `{"report":"nightly"}`, "timeout": "1500ms",
				},
				"retry":      map[string]any{"max_attempts": 10, "backoff": "5m"},
				"misfire":    "skip",
				"enabled":    true,
				"request_id": "req-1",
			}
			got := b.create(t, body, http.StatusCreated)
			want := Timer{
				ID: got.ID, App: app, Name: "Nightly report ⏰",
				Schedule: schedule.Spec{Cron: "0 9 * * *", Timezone: "Europe/Berlin"},
				Callback: Callback{
					URL: "https://example.com/hook?x=1", Method: "PUT",
					Headers: map[string]string{"X-Token": "s3cret", "Content-Type": "application/json"},
					Body:    `{"report":"nightly"}`, Timeout: "1.5s",
				},
				// An omitted max_backoff grows to a longer backoff.
				Retry:   Retry{MaxAttempts: 10, Backoff: "5m0s", MaxBackoff: "5m0s"},
				Misfire: "skip",
				Enabled: true, Status: "enabled", RequestID: "req-1", Version: 1,
				CreatedAt: "2026-11-21T09:00:00.000Z", UpdatedAt: "2026-11-21T09:00:00.000Z",
				// 09:00 in Berlin (CET, UTC+1) is 08:00Z; today's has passed.
				NextFireAt: ptr("2026-11-22T08:00:00.000Z"),
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("created\n%+v\nwant\n%+v", got, want)
			}
			r := b.do(t, http.MethodGet, timerPath(got.ID), nil)
			r.wantStatus(t, http.StatusOK)
			var again Timer
			r.decode(t, &again)
			if !reflect.DeepEqual(again, want) {
				t.Fatalf("read back\n%+v\nwant\n%+v", again, want)
			}
		})

		t.Run("OneShots", func(t *testing.T) {
			t.Parallel()
			b := setup(t, s)
			app := uniqueApp("oneshot")
			for _, c := range []struct {
				name string
				spec map[string]any
				at   string
			}{
				// "in" is stored as the absolute time it resolves to.
				{"in", map[string]any{"in": "90m"}, "2026-11-21T10:30:00.000Z"},
				{"future-at", map[string]any{"at": "2026-12-24T18:00:00+01:00"}, "2026-12-24T17:00:00.000Z"},
				// A past "at" fires at once: its next fire time is the "at" itself.
				{"past-at", map[string]any{"at": "2026-01-01T00:00:00Z"}, "2026-01-01T00:00:00.000Z"},
			} {
				body := timerBody(app, c.name)
				body["schedule"] = c.spec
				got := b.create(t, body, http.StatusCreated)
				if got.Schedule != (schedule.Spec{At: c.at}) || got.NextFireAt == nil || *got.NextFireAt != c.at {
					t.Errorf("%s: schedule %+v next_fire_at %v, want at %s", c.name, got.Schedule, got.NextFireAt, c.at)
				}
			}
		})

		t.Run("Disabled", func(t *testing.T) {
			t.Parallel()
			b := setup(t, s)
			body := timerBody(uniqueApp("disabled"), "off")
			body["enabled"] = false
			got := b.create(t, body, http.StatusCreated)
			if got.Enabled || got.Status != "disabled" || got.NextFireAt != nil {
				t.Fatalf("got %+v, want disabled without next_fire_at", got)
			}
			if r := b.do(t, http.MethodGet, timerPath(got.ID), nil); !strings.Contains(string(r.body), `"next_fire_at":null`) {
				t.Fatalf("next_fire_at not null: %s", r.body)
			}
		})

		t.Run("NameTakenPerApp", func(t *testing.T) {
			t.Parallel()
			b := setup(t, s)
			app, other := uniqueApp("names"), uniqueApp("names")
			b.create(t, timerBody(app, "same"), http.StatusCreated)
			b.do(t, http.MethodPost, "/api/v1/timers", timerBody(app, "same")).wantError(t, http.StatusConflict, "name_taken", "")
			// Names are unique per app only, and compared exactly.
			b.create(t, timerBody(other, "same"), http.StatusCreated)
			b.create(t, timerBody(app, "Same"), http.StatusCreated)
		})

		t.Run("LimitsFitTheStore", func(t *testing.T) {
			t.Parallel()
			// The longest accepted values, in 4-byte characters where text is free, are stored
			// and read back intact by every backend.
			b := setup(t, s)
			body := timerBody(uniqueApp(strings.Repeat("z", 55)), strings.Repeat("😀", MaxNameLen))
			body["request_id"] = strings.Repeat("𝄞", MaxRequestIDLen)
			url := "http://127.0.0.1:9/" + strings.Repeat("a", MaxURLLen-len("http://127.0.0.1:9/"))
			headers := map[string]any{}
			for i := range 4 {
				headers["X-H"+itoa(int64(i))] = strings.Repeat("<", 1000)
			}
			body["callback"] = map[string]any{
				"url": url, "headers": headers,
				// Stored escaped ("<" is 6 bytes as JSON), close to the limit of the column.
				"body": strings.Repeat("<", 5000),
			}
			body["schedule"] = map[string]any{"cron": "0 0 9 * * *", "timezone": "America/Argentina/Buenos_Aires"}
			got := b.create(t, body, http.StatusCreated)
			r := b.do(t, http.MethodGet, timerPath(got.ID), nil)
			var back Timer
			r.decode(t, &back)
			if !reflect.DeepEqual(back, got) || back.Name != body["name"] || back.RequestID != body["request_id"] || back.Callback.URL != url || len(back.Callback.Body) != 5000 {
				t.Fatalf("read back differs from created: %+v", back)
			}
			// A callback that would not fit once escaped is refused before the store.
			tooBig := `{"app":"big","name":"b","schedule":{"every":"1m"},"callback":{"url":"http://h/","body":"` +
				strings.Repeat("<", MaxCallbackBody) + `"}}`
			b.do(t, http.MethodPost, "/api/v1/timers", tooBig).wantError(t, http.StatusUnprocessableEntity, "invalid_value", "callback")
		})
	})
}

func TestIdempotentCreate(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s *dao.Store) {
		t.Run("SameRequestAnswersTheOriginal", func(t *testing.T) {
			t.Parallel()
			b := setup(t, s)
			app := uniqueApp("idem")
			first := `{"app":"` + app + `","name":"n","request_id":"k1","schedule":{"in":"1h"},
				"callback":{"url":"http://h/x","timeout":"5s"}}`
			orig := b.create(t, first, http.StatusCreated)
			b.hook.take()
			// Later, reformatted, keys reordered, defaults spelled out, durations respelled:
			// the same request.
			b.clock.Advance(time.Minute)
			same := `{ "request_id" : "k1", "callback": {"timeout":"5000ms","method":"POST","url":"http://h/x","headers":{}},
				"schedule":{"in":"60m"}, "enabled": true, "retry": {"max_attempts": 3}, "name":"n", "app":"` + app + `" }`
			again := b.create(t, same, http.StatusOK)
			if again.ID != orig.ID || !reflect.DeepEqual(again.Schedule, orig.Schedule) || again.Version != 1 {
				t.Fatalf("replay answered %+v, want the original %+v", again, orig)
			}
			if calls := b.hook.take(); len(calls) != 0 {
				t.Errorf("replay notified the engine: %+v", calls)
			}
			// The same key with another body is a conflict, including a changed default.
			for _, other := range []string{
				`{"app":"` + app + `","name":"n2","request_id":"k1","schedule":{"in":"1h"},"callback":{"url":"http://h/x"}}`,
				`{"app":"` + app + `","name":"n","request_id":"k1","schedule":{"in":"2h"},"callback":{"url":"http://h/x"}}`,
				`{"app":"` + app + `","name":"n","request_id":"k1","schedule":{"in":"1h"},"callback":{"url":"http://h/x"},"enabled":false}`,
			} {
				b.do(t, http.MethodPost, "/api/v1/timers", other).wantError(t, http.StatusConflict, "idempotency_conflict", "request_id")
			}
			// Keys are per app.
			otherApp := timerBody(uniqueApp("idem"), "n")
			otherApp["request_id"] = "k1"
			if got := b.create(t, otherApp, http.StatusCreated); got.ID == orig.ID {
				t.Fatal("another app's key answered this app's timer")
			}
		})

		t.Run("ReplayAfterChangeAnswersCurrentTimer", func(t *testing.T) {
			t.Parallel()
			b := setup(t, s)
			body := timerBody(uniqueApp("idem"), "n")
			body["request_id"] = "k"
			orig := b.create(t, body, http.StatusCreated)
			b.do(t, http.MethodPost, timerPath(orig.ID, "/disable"), nil).wantStatus(t, http.StatusOK)
			again := b.create(t, body, http.StatusOK)
			if again.ID != orig.ID || again.Status != "disabled" || again.Version != 2 {
				t.Fatalf("replay answered %+v", again)
			}
		})

		t.Run("ReplayAfterDeleteConflicts", func(t *testing.T) {
			t.Parallel()
			b := setup(t, s)
			body := timerBody(uniqueApp("idem"), "n")
			body["request_id"] = "k"
			orig := b.create(t, body, http.StatusCreated)
			b.do(t, http.MethodDelete, timerPath(orig.ID), nil).wantStatus(t, http.StatusNoContent)
			b.do(t, http.MethodPost, "/api/v1/timers", body).wantError(t, http.StatusConflict, "idempotency_conflict", "request_id")
		})
	})
}

func TestGetTimer(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s *dao.Store) {
		b := setup(t, s)
		tm := b.create(t, timerBody(uniqueApp("get"), "g"), http.StatusCreated)
		r := b.do(t, http.MethodGet, timerPath(tm.ID), nil)
		r.wantStatus(t, http.StatusOK)
		var got Timer
		r.decode(t, &got)
		if !reflect.DeepEqual(got, tm) {
			t.Fatalf("got %+v, want %+v", got, tm)
		}
		// next_fire_at moves with the clock: the next occurrence after now.
		b.clock.Advance(45 * time.Second)
		b.do(t, http.MethodGet, timerPath(tm.ID), nil).decode(t, &got)
		if *got.NextFireAt != "2026-11-21T09:01:00.000Z" {
			t.Fatalf("next_fire_at %s after 45s, want 09:01:00", *got.NextFireAt)
		}
		// Ids that are not positive integers in canonical form name no timer.
		for _, id := range []string{"999999999", "0", "-1", "abc", "1.5", "007", "+1", "99999999999999999999", "%20", "1e3"} {
			b.do(t, http.MethodGet, "/api/v1/timers/"+id, nil).wantError(t, http.StatusNotFound, "not_found", "")
		}
	})
}

func TestListTimers(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s *dao.Store) {
		t.Run("PaginationVisitsEachTimerOnce", func(t *testing.T) {
			t.Parallel()
			b := setup(t, s)
			app := uniqueApp("page")
			var want []int64
			for i := range 23 {
				want = append(want, b.create(t, timerBody(app, "t"+itoa(int64(i))), http.StatusCreated).ID)
			}
			for _, limit := range []int{1, 5, 22, 23, 24, 1000} {
				var got []int64
				cursor, pages := "", 0
				for {
					path := "/api/v1/timers?app=" + app + "&limit=" + itoa(int64(limit))
					if cursor != "" {
						path += "&cursor=" + cursor
					}
					r := b.do(t, http.MethodGet, path, nil)
					r.wantStatus(t, http.StatusOK)
					var page List[Timer]
					r.decode(t, &page)
					if len(page.Items) > limit {
						t.Fatalf("limit %d: page of %d", limit, len(page.Items))
					}
					for _, tm := range page.Items {
						got = append(got, tm.ID)
					}
					pages++
					if page.NextCursor == "" {
						break
					}
					cursor = page.NextCursor
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("limit %d: walked %v, want %v", limit, got, want)
				}
				if wantPages := (len(want) + limit - 1) / limit; pages != wantPages {
					t.Errorf("limit %d: %d pages, want %d (the last page ends the walk)", limit, pages, wantPages)
				}
			}
		})

		t.Run("Filters", func(t *testing.T) {
			t.Parallel()
			b := setup(t, s)
			app := uniqueApp("filter")
			on := b.create(t, timerBody(app, "on"), http.StatusCreated)
			off := timerBody(app, "off")
			off["enabled"] = false
			offT := b.create(t, off, http.StatusCreated)
			gone := b.create(t, timerBody(app, "gone"), http.StatusCreated)
			b.do(t, http.MethodDelete, timerPath(gone.ID), nil).wantStatus(t, http.StatusNoContent)
			b.create(t, timerBody(uniqueApp("filter"), "elsewhere"), http.StatusCreated)

			ids := func(query string) []int64 {
				r := b.do(t, http.MethodGet, "/api/v1/timers?"+query, nil)
				r.wantStatus(t, http.StatusOK)
				var page List[Timer]
				r.decode(t, &page)
				out := []int64{}
				for _, tm := range page.Items {
					out = append(out, tm.ID)
				}
				return out
			}
			for query, want := range map[string][]int64{
				"app=" + app:                       {on.ID, offT.ID},
				"app=" + app + "&status=enabled":   {on.ID},
				"app=" + app + "&status=disabled":  {offT.ID},
				"app=" + app + "&status=completed": {},
				"app=nobody-has-this-app":          {},
			} {
				if got := ids(query); !reflect.DeepEqual(got, want) {
					t.Errorf("%s: %v, want %v", query, got, want)
				}
			}
			// An empty list is [] and the last page's cursor is "".
			r := b.do(t, http.MethodGet, "/api/v1/timers?app=nobody-has-this-app", nil)
			if string(r.body) != `{"items":[],"next_cursor":""}` {
				t.Errorf("empty list: %s", r.body)
			}
		})

		t.Run("BadQuery", func(t *testing.T) {
			t.Parallel()
			b := setup(t, s)
			for _, c := range []struct{ query, code, field string }{
				{"limit=0", "invalid_limit", "limit"},
				{"limit=1001", "invalid_limit", "limit"},
				{"limit=-5", "invalid_limit", "limit"},
				{"limit=ten", "invalid_limit", "limit"},
				{"limit=1.5", "invalid_limit", "limit"},
				{"limit=99999999999999999999999", "invalid_limit", "limit"},
				{"cursor=!!", "invalid_cursor", "cursor"},
				{"cursor=" + encodeCursor(5) + "=", "invalid_cursor", "cursor"},
				{"cursor=YWJj", "invalid_cursor", "cursor"}, // "abc"
				{"cursor=MA", "invalid_cursor", "cursor"},   // "0"
				{"cursor=LTE", "invalid_cursor", "cursor"},  // "-1"
				{"status=deleted", "invalid_status", "status"},
				{"status=ENABLED", "invalid_status", "status"},
				{"status=running", "invalid_status", "status"},
				{"app=Upper", "invalid_app", "app"},
				{"app=%FF%FE", "invalid_app", "app"},
				{"app=" + strings.Repeat("a", 65), "invalid_app", "app"},
			} {
				b.do(t, http.MethodGet, "/api/v1/timers?"+c.query, nil).wantError(t, http.StatusBadRequest, c.code, c.field)
			}
		})
	})
}

func TestPatchTimer(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s *dao.Store) {
		t.Run("MergesCallbackAndRetry", func(t *testing.T) {
			t.Parallel()
			b := setup(t, s)
			body := timerBody(uniqueApp("patch"), "p")
			body["callback"] = map[string]any{
				"url": "http://h/a", "method": "PUT", "headers": map[string]any{"X-A": "1"}, "body": "hello",
			}
			body["retry"] = map[string]any{"max_attempts": 5, "backoff": "2s", "max_backoff": "10s"}
			tm := b.create(t, body, http.StatusCreated)
			b.hook.take()
			b.clock.Advance(time.Second)

			r := b.do(t, http.MethodPatch, timerPath(tm.ID), `{"callback":{"timeout":"10s"},"retry":{"max_attempts":7}}`)
			r.wantStatus(t, http.StatusOK)
			var got Timer
			r.decode(t, &got)
			wantCB := Callback{URL: "http://h/a", Method: "PUT", Headers: map[string]string{"X-A": "1"}, Body: "hello", Timeout: "10s"}
			wantRetry := Retry{MaxAttempts: 7, Backoff: "2s", MaxBackoff: "10s"}
			if !reflect.DeepEqual(got.Callback, wantCB) || got.Retry != wantRetry {
				t.Fatalf("merged callback %+v retry %+v, want %+v %+v", got.Callback, got.Retry, wantCB, wantRetry)
			}
			if got.Version != 2 || got.UpdatedAt != "2026-11-21T09:00:01.000Z" || got.CreatedAt != tm.CreatedAt || got.Name != "p" || got.Schedule != tm.Schedule {
				t.Fatalf("patched %+v", got)
			}
			// The schedule did not change, so neither did the anchor nor the next fire time.
			if *got.NextFireAt != *tm.NextFireAt {
				t.Errorf("next_fire_at moved to %s without a schedule change", *got.NextFireAt)
			}
			// headers given replace the headers; {} clears them.
			b.do(t, http.MethodPatch, timerPath(tm.ID), `{"callback":{"headers":{}}}`).decode(t, &got)
			if len(got.Callback.Headers) != 0 || got.Callback.Body != "hello" {
				t.Fatalf("headers {} gave %+v", got.Callback)
			}
			calls := b.hook.take()
			if len(calls) != 2 || calls[0].before == nil || calls[0].before.Version != 1 || calls[0].after.Version != 2 ||
				calls[0].after.Callback.TimeoutMS != 10000 || calls[1].before.Version != 2 || calls[1].after.Version != 3 {
				t.Fatalf("hook calls %+v", calls)
			}
		})

		t.Run("ScheduleResetsAnchor", func(t *testing.T) {
			t.Parallel()
			b := setup(t, s)
			tm := b.create(t, timerBody(uniqueApp("patch"), "p"), http.StatusCreated)
			b.clock.Advance(10 * time.Second)
			r := b.do(t, http.MethodPatch, timerPath(tm.ID), `{"schedule":{"every":"1m"},"name":"renamed"}`)
			r.wantStatus(t, http.StatusOK)
			var got Timer
			r.decode(t, &got)
			if got.Name != "renamed" || got.Schedule != (schedule.Spec{Every: "1m"}) || *got.NextFireAt != "2026-11-21T09:01:10.000Z" {
				t.Fatalf("patched %+v next %s, want every 1m from 09:00:10", got, *got.NextFireAt)
			}
			row, err := s.GetTimer(context.Background(), tm.ID)
			if err != nil || row.AnchorMS != t0.Add(10*time.Second).UnixMilli() {
				t.Fatalf("anchor %d (%v), want now", row.AnchorMS, err)
			}
			// The whole schedule is replaced: a cron with a zone, then "in".
			b.do(t, http.MethodPatch, timerPath(tm.ID), `{"schedule":{"cron":"*/5 * * * *","timezone":"Asia/Tokyo"}}`).decode(t, &got)
			if got.Schedule != (schedule.Spec{Cron: "*/5 * * * *", Timezone: "Asia/Tokyo"}) || *got.NextFireAt != "2026-11-21T09:05:00.000Z" {
				t.Fatalf("cron patch gave %+v %s", got.Schedule, *got.NextFireAt)
			}
			b.do(t, http.MethodPatch, timerPath(tm.ID), `{"schedule":{"in":"5s"}}`).decode(t, &got)
			if got.Schedule != (schedule.Spec{At: "2026-11-21T09:00:15.000Z"}) {
				t.Fatalf("in patch gave %+v", got.Schedule)
			}
		})

		t.Run("ScheduleKeepsDisabled", func(t *testing.T) {
			t.Parallel()
			b := setup(t, s)
			body := timerBody(uniqueApp("patch"), "p")
			body["enabled"] = false
			tm := b.create(t, body, http.StatusCreated)
			var got Timer
			b.do(t, http.MethodPatch, timerPath(tm.ID), `{"schedule":{"in":"1m"}}`).decode(t, &got)
			if got.Status != "disabled" || got.NextFireAt != nil || got.Version != 2 {
				t.Fatalf("patched disabled timer: %+v", got)
			}
		})

		t.Run("EmptyPatchChangesNothing", func(t *testing.T) {
			t.Parallel()
			b := setup(t, s)
			tm := b.create(t, timerBody(uniqueApp("patch"), "p"), http.StatusCreated)
			b.hook.take()
			for _, body := range []string{`{}`, `{"name":null}`} {
				var got Timer
				r := b.do(t, http.MethodPatch, timerPath(tm.ID), body)
				r.wantStatus(t, http.StatusOK)
				r.decode(t, &got)
				if got.Version != 1 {
					t.Fatalf("%s bumped the version: %+v", body, got)
				}
			}
			if calls := b.hook.take(); len(calls) != 0 {
				t.Errorf("no-op notified the engine: %+v", calls)
			}
		})

		t.Run("Errors", func(t *testing.T) {
			t.Parallel()
			b := setup(t, s)
			app := uniqueApp("patch")
			tm := b.create(t, timerBody(app, "p"), http.StatusCreated)
			b.create(t, timerBody(app, "taken"), http.StatusCreated)
			path := timerPath(tm.ID)
			for _, c := range []struct {
				body   string
				status int
				code   string
				field  string
			}{
				{`{"name":"taken"}`, 409, "name_taken", ""},
				{`{"app":"other"}`, 400, "unknown_field", "app"},
				{`{"enabled":false}`, 400, "unknown_field", "enabled"},
				{`{"status":"disabled"}`, 400, "unknown_field", "status"},
				{`{"request_id":"x"}`, 400, "unknown_field", "request_id"},
				{`{"callback":{"retries":1}}`, 400, "unknown_field", "callback.retries"},
				{`{"name":5}`, 400, "invalid_field", "name"},
				{`{"schedule":"* * * * *"}`, 400, "invalid_field", "schedule"},
				{`{"name":""}`, 422, "invalid_value", "name"},
				{`{"schedule":{}}`, 422, "invalid_schedule", "schedule"},
				{`{"schedule":{"cron":"61 * * * *"}}`, 422, "invalid_schedule", "schedule.cron"},
				{`{"callback":{"url":"ftp://h/"}}`, 422, "invalid_url", "callback.url"},
				// The merged policy must hold: backoff 10m over the stored max_backoff 1m.
				{`{"retry":{"backoff":"10m"}}`, 422, "invalid_value", "retry.max_backoff"},
				{`{"callback":{"headers":{"Tock-Timer":"1"}}}`, 422, "invalid_header", "callback.headers.Tock-Timer"},
				{`nope`, 400, "invalid_json", ""},
				{``, 400, "invalid_json", ""},
			} {
				b.do(t, http.MethodPatch, path, c.body).wantError(t, c.status, c.code, c.field)
			}
			var got Timer
			b.do(t, http.MethodGet, path, nil).decode(t, &got)
			if got.Version != 1 || got.Name != "p" {
				t.Fatalf("failed patches changed the timer: %+v", got)
			}
			b.do(t, http.MethodPatch, timerPath(999999999), `{"name":"x"}`).wantError(t, 404, "not_found", "")
			b.do(t, http.MethodPatch, "/api/v1/timers/x", `{"name":"x"}`).wantError(t, 404, "not_found", "")
		})
	})
}

func TestEnableDisable(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s *dao.Store) {
		b := setup(t, s)
		tm := b.create(t, timerBody(uniqueApp("toggle"), "t"), http.StatusCreated)
		b.hook.take()
		step := func(action string, wantStatus string, wantVersion int64) {
			t.Helper()
			r := b.do(t, http.MethodPost, timerPath(tm.ID, "/"+action), nil)
			r.wantStatus(t, http.StatusOK)
			var got Timer
			r.decode(t, &got)
			if got.Status != wantStatus || got.Enabled != (wantStatus == "enabled") || got.Version != wantVersion {
				t.Fatalf("%s: status %s enabled %v version %d, want %s v%d", action, got.Status, got.Enabled, got.Version, wantStatus, wantVersion)
			}
			if (wantStatus == "enabled") != (got.NextFireAt != nil) {
				t.Fatalf("%s: next_fire_at %v with status %s", action, got.NextFireAt, got.Status)
			}
		}
		step("enable", "enabled", 1) // no-op
		step("disable", "disabled", 2)
		step("disable", "disabled", 2) // no-op
		step("enable", "enabled", 3)
		step("enable", "enabled", 3) // no-op
		calls := b.hook.take()
		if len(calls) != 2 ||
			calls[0].before.Status != "enabled" || calls[0].after.Status != "disabled" || calls[0].after.Version != 2 ||
			calls[1].before.Status != "disabled" || calls[1].after.Status != "enabled" || calls[1].after.Version != 3 {
			t.Fatalf("hook calls %+v, want exactly the two changes", calls)
		}
		for _, action := range []string{"enable", "disable"} {
			b.do(t, http.MethodPost, timerPath(999999999, "/"+action), nil).wantError(t, 404, "not_found", "")
			b.do(t, http.MethodGet, timerPath(tm.ID, "/"+action), nil).wantError(t, 405, "method_not_allowed", "")
		}
	})
}

func TestCompletedOneShot(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s *dao.Store) {
		b := setup(t, s)
		body := timerBody(uniqueApp("done"), "once")
		body["schedule"] = map[string]any{"in": "1m"}
		tm := b.create(t, body, http.StatusCreated)
		b.clock.Advance(time.Minute)
		// What the engine does after firing it.
		if err := s.CompleteOneShot(context.Background(), tm.ID, tm.Version, b.clock.Now().UnixMilli()); err != nil {
			t.Fatal(err)
		}
		b.hook.take()
		var got Timer
		b.do(t, http.MethodGet, timerPath(tm.ID), nil).decode(t, &got)
		if got.Status != "completed" || got.Enabled || got.NextFireAt != nil || got.Version != 2 {
			t.Fatalf("completed timer reads %+v", got)
		}
		b.do(t, http.MethodPost, timerPath(tm.ID, "/enable"), nil).wantError(t, http.StatusConflict, "timer_completed", "")
		// Disabling it changes nothing: a disabled one-shot could be enabled and fire again.
		b.do(t, http.MethodPost, timerPath(tm.ID, "/disable"), nil).decode(t, &got)
		if got.Status != "completed" || got.Version != 2 {
			t.Fatalf("disable of completed gave %+v", got)
		}
		// A rename keeps it completed; a new schedule runs it again.
		b.do(t, http.MethodPatch, timerPath(tm.ID), `{"name":"once-renamed"}`).decode(t, &got)
		if got.Status != "completed" || got.Version != 3 {
			t.Fatalf("rename of completed gave %+v", got)
		}
		b.do(t, http.MethodPatch, timerPath(tm.ID), `{"schedule":{"in":"1h"}}`).decode(t, &got)
		if got.Status != "enabled" || !got.Enabled || got.Version != 4 || *got.NextFireAt != "2026-11-21T10:01:00.000Z" {
			t.Fatalf("new schedule gave %+v", got)
		}
		calls := b.hook.take()
		if len(calls) != 2 || calls[1].before.Status != "completed" || calls[1].after.Status != "enabled" {
			t.Fatalf("hook calls %+v", calls)
		}
		b.do(t, http.MethodPost, timerPath(tm.ID, "/enable"), nil).wantStatus(t, http.StatusOK)
	})
}

func TestDeleteTimer(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s *dao.Store) {
		b := setup(t, s)
		app := uniqueApp("del")
		tm := b.create(t, timerBody(app, "doomed"), http.StatusCreated)
		b.hook.take()
		b.clock.Advance(time.Second)
		r := b.do(t, http.MethodDelete, timerPath(tm.ID), nil)
		r.wantStatus(t, http.StatusNoContent)
		if len(r.body) != 0 {
			t.Errorf("204 with body %q", r.body)
		}
		calls := b.hook.take()
		if len(calls) != 1 || calls[0].before == nil || calls[0].before.Status != "enabled" ||
			calls[0].after.Status != "deleted" || calls[0].after.ID != tm.ID || calls[0].after.Version != 2 ||
			calls[0].after.UpdatedMS != b.clock.Now().UnixMilli() {
			t.Fatalf("hook calls %+v", calls)
		}
		// 404 everywhere.
		for _, c := range []struct{ method, path string }{
			{http.MethodGet, timerPath(tm.ID)},
			{http.MethodPatch, timerPath(tm.ID)},
			{http.MethodDelete, timerPath(tm.ID)},
			{http.MethodPost, timerPath(tm.ID, "/enable")},
			{http.MethodPost, timerPath(tm.ID, "/disable")},
			{http.MethodGet, timerPath(tm.ID, "/executions")},
		} {
			b.do(t, c.method, c.path, `{"name":"x"}`).wantError(t, http.StatusNotFound, "not_found", "")
		}
		if calls := b.hook.take(); len(calls) != 0 {
			t.Errorf("404s notified the engine: %+v", calls)
		}
		// The name is free again.
		again := b.create(t, timerBody(app, "doomed"), http.StatusCreated)
		if again.ID == tm.ID {
			t.Fatal("id reused")
		}
	})
}

// conflictStore makes the first n UpdateTimer calls lose an optimistic locking race: another
// writer changes the timer just before.
type conflictStore struct {
	*dao.Store
	n int
}

func (c *conflictStore) UpdateTimer(ctx context.Context, t dao.Timer, expect, nowMS int64) (dao.Timer, error) {
	if c.n > 0 {
		c.n--
		cur, err := c.Store.GetTimer(ctx, t.ID)
		if err != nil {
			return dao.Timer{}, err
		}
		cur.Retry.MaxAttempts++ // the concurrent writer's change
		if _, err := c.Store.UpdateTimer(ctx, cur, cur.Version, nowMS); err != nil {
			return dao.Timer{}, err
		}
	}
	return c.Store.UpdateTimer(ctx, t, expect, nowMS)
}

func TestOptimisticLocking(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s *dao.Store) {
		t.Run("RetriesAndKeepsTheOtherChange", func(t *testing.T) {
			t.Parallel()
			cs := &conflictStore{Store: s}
			b := setup(t, s, setupOpts{store: cs})
			tm := b.create(t, timerBody(uniqueApp("lock"), "l"), http.StatusCreated)
			cs.n = maxUpdateAttempts - 1
			var got Timer
			r := b.do(t, http.MethodPatch, timerPath(tm.ID), `{"name":"after-race"}`)
			r.wantStatus(t, http.StatusOK)
			r.decode(t, &got)
			// Each lost race re-read the timer, so the other writer's changes survive.
			if got.Name != "after-race" || got.Retry.MaxAttempts != 3+maxUpdateAttempts-1 || got.Version != int64(maxUpdateAttempts)+1 {
				t.Fatalf("got %+v", got)
			}
		})
		t.Run("GivesUpWith409", func(t *testing.T) {
			t.Parallel()
			cs := &conflictStore{Store: s}
			b := setup(t, s, setupOpts{store: cs})
			tm := b.create(t, timerBody(uniqueApp("lock"), "l"), http.StatusCreated)
			cs.n = maxUpdateAttempts
			b.do(t, http.MethodPost, timerPath(tm.ID, "/disable"), nil).wantError(t, http.StatusConflict, "version_conflict", "")
		})
	})
}
