// Package test holds tock's end-to-end tests: the real clock, the HTTP API, a local callback
// receiver, embedded stores or the real MariaDB and Redis, in-process apps and separate
// processes.
package test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/redis/go-redis/v9"

	"github.com/tockd/tock/app"
	"github.com/tockd/tock/conf"
	"github.com/tockd/tock/dao/daotest"
)

// delivery is one callback as the receiver saw it.
type delivery struct {
	TimerID     int64
	ScheduledMS int64
	Attempt     string
	Key         string
	ScheduledAt string
	Body        string
	Method      string
	Custom      string
	Arrived     time.Time
}

// receiver records every callback it gets.
type receiver struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []delivery
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		arrived := time.Now()
		body, _ := io.ReadAll(req.Body)
		id, _ := strconv.ParseInt(req.Header.Get("Tock-Timer-Id"), 10, 64)
		sched, _ := time.Parse(time.RFC3339Nano, req.Header.Get("Tock-Scheduled-At"))
		r.mu.Lock()
		r.got = append(r.got, delivery{
			TimerID: id, ScheduledMS: sched.UnixMilli(), Attempt: req.Header.Get("Tock-Attempt"),
			Key: req.Header.Get("Idempotency-Key"), ScheduledAt: req.Header.Get("Tock-Scheduled-At"),
			Body: string(body), Method: req.Method, Custom: req.Header.Get("X-Custom"), Arrived: arrived,
		})
		r.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) deliveries() []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivery(nil), r.got...)
}

// client is a small JSON client for the tock API.
type client struct {
	t    *testing.T
	base string
	http *http.Client
}

func (c client) do(method, path string, body any, out any) int {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, c.base+path, rd)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 500 {
		c.t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			c.t.Fatalf("%s %s: decode %q: %v", method, path, raw, err)
		}
	}
	return resp.StatusCode
}

type timerJSON struct {
	ID         int64   `json:"id"`
	Status     string  `json:"status"`
	NextFireAt *string `json:"next_fire_at"`
	Version    int64   `json:"version"`
	CreatedAt  string  `json:"created_at"`
}

type executionJSON struct {
	ID          int64   `json:"id"`
	TimerID     int64   `json:"timer_id"`
	ScheduledAt string  `json:"scheduled_at"`
	Status      string  `json:"status"`
	Attempt     int     `json:"attempt"`
	StartedAt   *string `json:"started_at"`
	FinishedAt  *string `json:"finished_at"`
	HTTPStatus  int     `json:"http_status"`
	Instance    string  `json:"instance"`
}

func (c client) executions(timerID int64) []executionJSON {
	c.t.Helper()
	var all []executionJSON
	cursor := ""
	for i := 0; i < 100; i++ {
		var page struct {
			Items      []executionJSON `json:"items"`
			NextCursor string          `json:"next_cursor"`
		}
		if code := c.do("GET", fmt.Sprintf("/api/v1/timers/%d/executions?limit=1000&cursor=%s", timerID, cursor), nil, &page); code != 200 {
			c.t.Fatalf("executions of %d: %d", timerID, code)
		}
		all = append(all, page.Items...)
		if page.NextCursor == "" {
			return all
		}
		cursor = page.NextCursor
	}
	c.t.Fatal("executions: too many pages")
	return nil
}

func mustParseTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("parse time %q: %v", s, err)
	}
	return v
}

// backend chooses the stores of an end-to-end run.
type backend struct {
	name      string
	mysqlDSN  string   // empty: embedded SQLite
	redisAddr []string // empty: embedded miniredis
	keyPrefix string
}

func embeddedBackend() backend { return backend{name: "embedded"} }

// realBackend gives a fresh MariaDB database and Redis key prefix, or skips (fails under CI).
func realBackend(t *testing.T) backend {
	t.Helper()
	addr := os.Getenv("TOCK_TEST_REDIS_ADDR")
	if addr == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("TOCK_TEST_REDIS_ADDR must be set under CI")
		}
		t.Skip("TOCK_TEST_REDIS_ADDR not set: skipping the MariaDB + Redis end-to-end test")
	}
	dsn := daotest.MySQLDSN(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("redis at %s: %v", addr, err)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	prefix := "tocke2e:" + hex.EncodeToString(b) + ":"
	t.Cleanup(func() {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		defer rdb.Close()
		ctx := context.Background()
		iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
	})
	return backend{name: "mariadb+redis", mysqlDSN: dsn, redisAddr: []string{addr}, keyPrefix: prefix}
}

func (b backend) config(t *testing.T, instance string) conf.Config {
	cfg := conf.Default()
	cfg.InstanceID = instance
	cfg.DataDir = t.TempDir()
	cfg.HTTP.Addr = "127.0.0.1:0"
	cfg.HTTP.ShutdownTimeout = conf.Duration(5 * time.Second)
	cfg.MySQL.DSN = b.mysqlDSN
	cfg.Redis.Addr = b.redisAddr
	if b.keyPrefix != "" {
		cfg.Redis.KeyPrefix = b.keyPrefix
	}
	cfg.Log.Level = "warn"
	// A short stamping window: every-second timers stamp 120 occurrences each instead of
	// 7,200, which keeps timer creation cheap under -race on a small machine. The window's
	// length changes no firing logic.
	cfg.Engine.MigrateStep = conf.Duration(time.Minute)
	cfg.Engine.MigrateWindow = conf.Duration(2 * time.Minute)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// startApp runs one tock in this process with the real clock.
func startApp(t *testing.T, cfg conf.Config) client {
	t.Helper()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	a, err := app.New(context.Background(), cfg, log, clockwork.NewRealClock())
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		a.Stop()
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	return client{t: t, base: "http://" + a.Addr(), http: &http.Client{Timeout: 10 * time.Second}}
}

var scheduledAtFormat = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$`)

// lateness summarizes arrival minus scheduled time.
func lateness(ds []delivery) string {
	if len(ds) == 0 {
		return "no deliveries"
	}
	ms := make([]float64, len(ds))
	for i, d := range ds {
		ms[i] = float64(d.Arrived.Sub(time.UnixMilli(d.ScheduledMS)).Microseconds()) / 1000
	}
	sort.Float64s(ms)
	q := func(p float64) float64 { return ms[int(p*float64(len(ms)-1))] }
	return fmt.Sprintf("n=%d lateness ms: min=%.1f p50=%.1f p90=%.1f p99=%.1f max=%.1f",
		len(ms), ms[0], q(0.5), q(0.9), q(0.99), ms[len(ms)-1])
}

func waitUntil(t *testing.T, deadline time.Time, what string, cond func() bool) {
	t.Helper()
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

func uniqueApp(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return strings.ToLower(prefix + "-" + hex.EncodeToString(b))
}
