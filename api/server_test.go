package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tockd/tock/dao"
	"github.com/tockd/tock/dao/daotest"
)

func TestRoutes(t *testing.T) {
	t.Parallel()
	b := setup(t, daotest.SQLite(t))
	t.Run("UnknownRouteIs404JSON", func(t *testing.T) {
		for _, p := range []string{"/", "/api", "/api/v1", "/api/v2/timers", "/api/v1/timers/", "/api/v1/timers/1/", "/api/v1/timers/1/fire", "/api/v1/executions", "/favicon.ico"} {
			b.do(t, http.MethodGet, p, nil).wantError(t, http.StatusNotFound, "not_found", "")
		}
	})
	t.Run("WrongMethodIs405WithAllow", func(t *testing.T) {
		for _, c := range []struct{ method, path, allow string }{
			{http.MethodPut, "/api/v1/timers", "POST, GET"},
			{http.MethodDelete, "/api/v1/timers", "POST, GET"},
			{http.MethodPost, "/api/v1/timers/1", "GET, PATCH, DELETE"},
			{http.MethodPut, "/api/v1/timers/1", "GET, PATCH, DELETE"},
			{http.MethodGet, "/api/v1/timers/1/enable", "POST"},
			{http.MethodDelete, "/api/v1/executions/1", "GET"},
			{http.MethodPost, "/healthz", "GET, HEAD"},
			{http.MethodPut, "/readyz", "GET, HEAD"},
			{http.MethodHead, "/api/v1/timers", "POST, GET"},
		} {
			r := b.do(t, c.method, c.path, nil)
			r.wantError(t, http.StatusMethodNotAllowed, "method_not_allowed", "")
			if got := r.header.Get("Allow"); !sameSet(got, c.allow) {
				t.Errorf("%s %s: Allow %q, want %q", c.method, c.path, got, c.allow)
			}
		}
	})
	t.Run("Healthz", func(t *testing.T) {
		r := b.do(t, http.MethodGet, "/healthz", nil)
		r.wantStatus(t, http.StatusOK)
		if string(r.body) != `{"status":"ok","version":"test"}` {
			t.Fatalf("healthz: %s", r.body)
		}
		b.do(t, http.MethodHead, "/healthz", nil).wantStatus(t, http.StatusOK)
	})
	t.Run("RequestsAreLoggedAtDebug", func(t *testing.T) {
		b.do(t, http.MethodGet, "/healthz", nil)
		if logs := b.logs.String(); !strings.Contains(logs, "level=DEBUG msg=\"http request\" method=GET path=/healthz status=200") {
			t.Fatalf("logs: %s", logs)
		}
	})
}

func sameSet(a, b string) bool {
	as, bs := strings.Split(a, ", "), strings.Split(b, ", ")
	if len(as) != len(bs) {
		return false
	}
	for _, x := range as {
		if !strings.Contains(", "+b+", ", ", "+x+", ") {
			return false
		}
	}
	return true
}

func TestReadyz(t *testing.T) {
	t.Parallel()
	s := daotest.SQLite(t)
	ok := Check{Name: "mysql", Fn: func(ctx context.Context) error { return s.Ping(ctx) }}
	t.Run("Ready", func(t *testing.T) {
		t.Parallel()
		b := setup(t, s, setupOpts{checks: []Check{ok, {Name: "redis", Fn: func(context.Context) error { return nil }}}})
		r := b.do(t, http.MethodGet, "/readyz", nil)
		r.wantStatus(t, http.StatusOK)
		if string(r.body) != `{"status":"ready","checks":{"mysql":"ok","redis":"ok"}}` {
			t.Fatalf("readyz: %s", r.body)
		}
	})
	t.Run("NamesTheFailingStore", func(t *testing.T) {
		t.Parallel()
		down := Check{Name: "redis", Fn: func(context.Context) error { return errors.New("dial tcp 127.0.0.1:6379: connection refused") }}
		boom := Check{Name: "panicky", Fn: func(context.Context) error { panic("oops") }}
		b := setup(t, s, setupOpts{checks: []Check{ok, down, boom}})
		r := b.do(t, http.MethodGet, "/readyz", nil)
		var body struct {
			Error  errorDetail       `json:"error"`
			Checks map[string]string `json:"checks"`
		}
		r.decode(t, &body)
		if r.status != http.StatusServiceUnavailable || body.Error.Code != "not_ready" ||
			body.Error.Message != "redis: dial tcp 127.0.0.1:6379: connection refused; panicky: check panicked: oops" ||
			body.Checks["mysql"] != "ok" || body.Checks["redis"] != "dial tcp 127.0.0.1:6379: connection refused" {
			t.Fatalf("readyz: %d %s", r.status, r.body)
		}
	})
	t.Run("ClosedStore", func(t *testing.T) {
		t.Parallel()
		closed := daotest.SQLite(t)
		if err := closed.Close(); err != nil {
			t.Fatal(err)
		}
		b := setup(t, s, setupOpts{checks: []Check{{Name: "sqlite", Fn: closed.Ping}}})
		r := b.do(t, http.MethodGet, "/readyz", nil)
		if r.status != http.StatusServiceUnavailable || !strings.Contains(string(r.body), `"message":"sqlite: `) {
			t.Fatalf("readyz: %d %s", r.status, r.body)
		}
	})
}

func TestBodyTooLarge(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s *dao.Store) {
		b := setup(t, s)
		tm := b.create(t, timerBody(uniqueApp("big"), "b"), http.StatusCreated)
		// Valid JSON just over the limit: the size alone is refused.
		big := `{"name":"` + strings.Repeat("x", MaxBodyBytes) + `"}`
		b.do(t, http.MethodPost, "/api/v1/timers", big).wantError(t, http.StatusRequestEntityTooLarge, "body_too_large", "")
		b.do(t, http.MethodPatch, timerPath(tm.ID), big).wantError(t, http.StatusRequestEntityTooLarge, "body_too_large", "")
		// Exactly the limit is read (and then judged on its content).
		exact := `{"name":"` + strings.Repeat("x", MaxBodyBytes-11) + `"}`
		if len(exact) != MaxBodyBytes {
			t.Fatal(len(exact))
		}
		b.do(t, http.MethodPatch, timerPath(tm.ID), exact).wantError(t, http.StatusUnprocessableEntity, "invalid_value", "name")
	})
}

// brokenStore fails every call the way a store outage does, or panics.
type brokenStore struct {
	*dao.Store
	panics bool
}

var errOutage = errors.New("dial tcp 127.0.0.1:3306: connect: connection refused")

func (b brokenStore) fail() error {
	if b.panics {
		panic("store exploded")
	}
	return errOutage
}

func (b brokenStore) CreateTimer(context.Context, dao.Timer, int64) (dao.Timer, bool, error) {
	return dao.Timer{}, false, b.fail()
}
func (b brokenStore) GetTimer(context.Context, int64) (dao.Timer, error) {
	return dao.Timer{}, b.fail()
}
func (b brokenStore) ListTimers(context.Context, dao.ListTimersParams) ([]dao.Timer, error) {
	return nil, b.fail()
}
func (b brokenStore) GetExecution(context.Context, int64) (dao.Execution, error) {
	return dao.Execution{}, b.fail()
}

func TestStoreUnavailable(t *testing.T) {
	t.Parallel()
	s := daotest.SQLite(t)
	b := setup(t, s, setupOpts{store: brokenStore{Store: s}})
	for _, c := range []struct{ method, path string }{
		{http.MethodPost, "/api/v1/timers"},
		{http.MethodGet, "/api/v1/timers"},
		{http.MethodGet, "/api/v1/timers/1"},
		{http.MethodPatch, "/api/v1/timers/1"},
		{http.MethodDelete, "/api/v1/timers/1"},
		{http.MethodPost, "/api/v1/timers/1/enable"},
		{http.MethodGet, "/api/v1/timers/1/executions"},
		{http.MethodGet, "/api/v1/executions/1"},
	} {
		body := any(nil)
		if c.method == http.MethodPost || c.method == http.MethodPatch {
			body = timerBody("outage", "o")
			if c.method == http.MethodPatch {
				body = `{"name":"x"}`
			}
		}
		b.do(t, c.method, c.path, body).wantError(t, http.StatusServiceUnavailable, "store_unavailable", "")
	}
	// The cause is logged for operators, never sent to clients.
	if logs := b.logs.String(); !strings.Contains(logs, "level=ERROR") || !strings.Contains(logs, "connection refused") {
		t.Errorf("outage not logged: %s", logs)
	}
}

func TestPanicIsRecovered(t *testing.T) {
	t.Parallel()
	s := daotest.SQLite(t)
	b := setup(t, s, setupOpts{store: brokenStore{Store: s, panics: true}})
	req := httptest.NewRequest(http.MethodGet, "/api/v1/timers/1", nil)
	rec := httptest.NewRecorder()
	b.h.ServeHTTP(rec, req)
	var body errorBody
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Code != http.StatusInternalServerError || body.Error.Code != "internal" {
		t.Fatalf("panic answered %d %s (%v)", rec.Code, rec.Body, err)
	}
	if logs := b.logs.String(); !strings.Contains(logs, "store exploded") || !strings.Contains(logs, "stack=") {
		t.Errorf("panic not logged with its stack: %s", logs)
	}
}

func TestEngineHookFailureDoesNotFailTheRequest(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s *dao.Store) {
		b := setup(t, s)
		b.hook.err = errors.New("redis down")
		tm := b.create(t, timerBody(uniqueApp("hook"), "h"), http.StatusCreated)
		b.do(t, http.MethodPost, timerPath(tm.ID, "/disable"), nil).wantStatus(t, http.StatusOK)
		b.do(t, http.MethodDelete, timerPath(tm.ID), nil).wantStatus(t, http.StatusNoContent)
		if n := len(b.hook.take()); n != 3 {
			t.Fatalf("hook called %d times, want 3", n)
		}
		if logs := b.logs.String(); strings.Count(logs, "level=WARN") != 3 || !strings.Contains(logs, "redis down") {
			t.Fatalf("hook failures not logged: %s", logs)
		}
	})
}

func TestNilEngineHook(t *testing.T) {
	t.Parallel()
	s := daotest.SQLite(t)
	a := New(Deps{Store: s, Clock: setup(t, s).clock})
	req := httptest.NewRequest(http.MethodPost, "/api/v1/timers", strings.NewReader(string(mustMarshal(timerBody("nohook", "n")))))
	rec := httptest.NewRecorder()
	a.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusCreated {
		t.Fatalf("create without engine: %d %s", rec.Code, rec.Body)
	}
}

func mustMarshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
