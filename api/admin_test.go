package api

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/tockd/tock/compensator"
	"github.com/tockd/tock/dao"
	"github.com/tockd/tock/dao/daotest"
)

type fakeCompensation struct {
	status compensator.Status
	report compensator.Report
	err    error
	runs   int
}

func (f *fakeCompensation) RunNow(context.Context) (compensator.Report, error) {
	f.runs++
	return f.report, f.err
}
func (f *fakeCompensation) Status() compensator.Status { return f.status }

func adminSetup(t *testing.T, comp Compensation) http.Handler {
	t.Helper()
	return New(Deps{Store: daotest.SQLite(t), Clock: setup(t, daotest.SQLite(t)).clock, Compensation: comp,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}).Handler()
}

func TestAdminCompensation(t *testing.T) {
	t.Parallel()
	at := t0.Add(time.Hour)
	rep := compensator.Report{Kind: compensator.KindManual, At: at, Duration: 1500 * time.Millisecond,
		Stuck: 1, Missing: 6, Redriven: 5, Missed: 2, Succeeded: 4, Failed: 1, SlicesScanned: 3, SlicesDone: 477}
	fake := &fakeCompensation{
		report: rep,
		status: compensator.Status{InstanceID: "i1", StartedAt: t0, Uptime: time.Hour, Interval: 10 * time.Second,
			NextPassAt: at.Add(10 * time.Second), Passes: 4, LastPass: &rep},
	}
	b := &testBundle{h: adminSetup(t, fake)}

	t.Run("RunReturnsWhatThePassFound", func(t *testing.T) {
		r := b.do(t, http.MethodPost, "/api/v1/admin/compensation/run", nil)
		r.wantStatus(t, http.StatusOK)
		var got CompensationPass
		r.decode(t, &got)
		want := CompensationPass{Kind: "manual", At: "2026-11-21T10:00:00.000Z", DurationMS: 1500, Found: 7,
			Stuck: 1, Missing: 6, Redriven: 5, Missed: 2, Succeeded: 4, Failed: 1, SlicesScanned: 3, SlicesDone: 477}
		if !reflect.DeepEqual(got, want) || fake.runs != 1 {
			t.Fatalf("run = %+v (runs %d), want %+v", got, fake.runs, want)
		}
	})
	t.Run("StatusReportsUptimeLastPassAndInterval", func(t *testing.T) {
		r := b.do(t, http.MethodGet, "/api/v1/admin/compensation", nil)
		r.wantStatus(t, http.StatusOK)
		m := r.raw(t)
		if m["instance"] != "i1" || m["uptime"] != "1h0m0s" || m["uptime_ms"] != float64(3_600_000) ||
			m["interval"] != "10s" || m["interval_ms"] != float64(10_000) || m["passes"] != float64(4) ||
			m["started_at"] != "2026-11-21T09:00:00.000Z" || m["next_pass_at"] != "2026-11-21T10:00:10.000Z" ||
			m["last_takeover_at"] != nil {
			t.Fatalf("status = %v", m)
		}
		last, ok := m["last_pass"].(map[string]any)
		if !ok || last["found"] != float64(7) || last["redriven"] != float64(5) || last["kind"] != "manual" {
			t.Fatalf("last_pass = %v", m["last_pass"])
		}
	})
	t.Run("FailedPassWithoutResultIs503", func(t *testing.T) {
		b := &testBundle{h: adminSetup(t, &fakeCompensation{err: errors.New("store down")})}
		b.do(t, http.MethodPost, "/api/v1/admin/compensation/run", nil).
			wantError(t, http.StatusServiceUnavailable, codeStoreUnavailable, "")
	})
	t.Run("NotRunningIs404", func(t *testing.T) {
		b := &testBundle{h: adminSetup(t, nil)}
		b.do(t, http.MethodGet, "/api/v1/admin/compensation", nil).wantError(t, http.StatusNotFound, codeNotFound, "")
		b.do(t, http.MethodPost, "/api/v1/admin/compensation/run", nil).wantError(t, http.StatusNotFound, codeNotFound, "")
	})
}

func TestMisfireField(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s *dao.Store) {
		b := setup(t, s)
		app := uniqueApp("misfire")
		body := timerBody(app, "a")
		got := b.create(t, body, http.StatusCreated)
		if got.Misfire != dao.MisfireFireAll {
			t.Fatalf("default misfire = %q", got.Misfire)
		}
		body = timerBody(app, "b")
		body["misfire"] = "fire_once"
		got = b.create(t, body, http.StatusCreated)
		if got.Misfire != dao.MisfireFireOnce {
			t.Fatalf("misfire = %q", got.Misfire)
		}
		r := b.do(t, http.MethodPatch, timerPath(got.ID), map[string]any{"misfire": "skip"})
		r.wantStatus(t, http.StatusOK)
		var patched Timer
		r.decode(t, &patched)
		if patched.Misfire != dao.MisfireSkip || patched.Version != 2 {
			t.Fatalf("patched = %+v", patched)
		}
		if row, err := s.GetTimer(context.Background(), got.ID); err != nil || row.Misfire != dao.MisfireSkip {
			t.Fatalf("stored misfire = %q, %v", row.Misfire, err)
		}

		body = timerBody(app, "c")
		body["misfire"] = "fire_twice"
		b.do(t, http.MethodPost, "/api/v1/timers", body).wantError(t, http.StatusUnprocessableEntity, codeInvalidValue, "misfire")
		b.do(t, http.MethodPatch, timerPath(got.ID), map[string]any{"misfire": ""}).
			wantError(t, http.StatusUnprocessableEntity, codeInvalidValue, "misfire")
		b.do(t, http.MethodPatch, timerPath(got.ID), map[string]any{"misfire": 1}).
			wantError(t, http.StatusBadRequest, codeInvalidField, "misfire")
	})
}
