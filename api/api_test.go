package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"

	"github.com/tockd/tock/dao"
	"github.com/tockd/tock/dao/daotest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// ants' default pool starts at init (imported through compensator -> executor).
		goleak.IgnoreCurrent(),
		// database/sql and the MySQL driver close their goroutines asynchronously.
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"),
		goleak.IgnoreTopFunction("github.com/go-sql-driver/mysql.(*mysqlConn).startWatcher.func1"),
	)
}

// t0 is the fake clock's start: 2026-11-21T09:00:00Z.
var t0 = time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC)

// seq makes app names unique across the parallel tests sharing one store.
var seq atomic.Int64

func uniqueApp(prefix string) string {
	return prefix + "-" + strconv.FormatInt(seq.Add(1), 10)
}

type testBundle struct {
	store Store
	dao   *dao.Store
	clock *clockwork.FakeClock
	hook  *fakeHook
	logs  *syncBuffer
	api   *API
	h     http.Handler
}

type setupOpts struct {
	store  Store // wraps the dao store when set
	checks []Check
	quiet  bool // discard logs (fuzzing makes many)
}

func setup(t testing.TB, s *dao.Store, opts ...setupOpts) *testBundle {
	t.Helper()
	var o setupOpts
	if len(opts) > 0 {
		o = opts[0]
	}
	b := &testBundle{
		store: s,
		dao:   s,
		clock: clockwork.NewFakeClockAt(t0),
		hook:  &fakeHook{},
		logs:  &syncBuffer{},
	}
	if o.store != nil {
		b.store = o.store
	}
	var logs io.Writer = b.logs
	if o.quiet {
		logs = io.Discard
	}
	b.api = New(Deps{
		Store:   b.store,
		Clock:   b.clock,
		Engine:  b.hook,
		Checks:  o.checks,
		Log:     slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Version: "test",
	})
	b.h = b.api.Handler()
	return b
}

type response struct {
	status int
	header http.Header
	body   []byte
}

// do sends a request; body is a string or []byte sent as is, or anything else as JSON.
func (b *testBundle) do(t *testing.T, method, path string, body any) response {
	t.Helper()
	var r io.Reader
	switch v := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(v)
	case []byte:
		r = bytes.NewReader(v)
	default:
		j, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(j)
	}
	req := httptest.NewRequest(method, path, r)
	if r != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	rec := httptest.NewRecorder()
	b.h.ServeHTTP(rec, req)
	res := response{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
	// 503 is a store outage (tests cause one on purpose); 500 is a bug.
	if res.status == http.StatusInternalServerError {
		t.Errorf("%s %s: status %d: %s", method, path, res.status, res.body)
	}
	return res
}

// create posts a timer and returns it, failing unless the answer is want.
func (b *testBundle) create(t *testing.T, body any, want int) Timer {
	t.Helper()
	r := b.do(t, http.MethodPost, "/api/v1/timers", body)
	if r.status != want {
		t.Fatalf("create: status %d, want %d: %s", r.status, want, r.body)
	}
	var tm Timer
	r.decode(t, &tm)
	return tm
}

// decode replaces *v (zeroed first, so reusing a variable never merges old fields in).
func (r response) decode(t testing.TB, v any) {
	t.Helper()
	reflect.ValueOf(v).Elem().SetZero()
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("decode %T from %s: %v", v, r.body, err)
	}
}

func (r response) raw(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("response is not a JSON object: %s: %v", r.body, err)
	}
	return m
}

// wantStatus fails unless the response has status.
func (r response) wantStatus(t *testing.T, status int) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d: %s", r.status, status, r.body)
	}
}

// wantError checks status and the exact error shape, code and field.
func (r response) wantError(t *testing.T, status int, code, field string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d: %s", r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("Content-Type %q, want JSON", ct)
	}
	var body struct {
		Error map[string]string `json:"error"`
	}
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		t.Fatalf("error body %s: %v", r.body, err)
	}
	e := body.Error
	if e["code"] != code || e["field"] != field {
		t.Fatalf("error code %q field %q, want %q %q: %s", e["code"], e["field"], code, field, r.body)
	}
	if e["message"] == "" {
		t.Errorf("error without message: %s", r.body)
	}
	if _, ok := e["field"]; ok && field == "" {
		t.Errorf("field present but empty: %s", r.body)
	}
	if statusOf(code) != status {
		t.Errorf("errorTable maps %s to %d, answered %d", code, statusOf(code), status)
	}
}

// timerBody is a valid create body; callers change fields.
func timerBody(app, name string) map[string]any {
	return map[string]any{
		"app":      app,
		"name":     name,
		"schedule": map[string]any{"every": "30s"},
		"callback": map[string]any{"url": "http://127.0.0.1:9/hook"},
	}
}

func timerPath(id int64, suffix ...string) string {
	return "/api/v1/timers/" + itoa(id) + strings.Join(suffix, "")
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func ptr[T any](v T) *T { return &v }

// fakeHook records the engine notifications.
type fakeHook struct {
	mu    sync.Mutex
	calls []hookCall
	err   error
}

type hookCall struct {
	before *dao.Timer
	after  dao.Timer
}

func (h *fakeHook) TimerChanged(ctx context.Context, before *dao.Timer, after dao.Timer) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if before != nil {
		c := *before
		before = &c
	}
	h.calls = append(h.calls, hookCall{before, after})
	return h.err
}

func (h *fakeHook) take() []hookCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.calls
	h.calls = nil
	return c
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// forEachStore runs fn on SQLite and (when configured) MariaDB; every store serves all of a
// test's parallel subtests, each with its own app names.
func forEachStore(t *testing.T, fn func(t *testing.T, s *dao.Store)) {
	daotest.ForEachStore(t, fn)
}
