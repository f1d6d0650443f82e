package test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tockd/tock/dao"
	"github.com/tockd/tock/dao/daotest"
	"github.com/tockd/tock/schedule"
)

type batchJSON struct {
	ID         int64          `json:"id"`
	Status     string         `json:"status"`
	Total      int            `json:"total"`
	Counts     map[string]int `json:"counts"`
	DurationMS *int64         `json:"duration_ms"`
}

// TestBatchSurvivesKill9 runs a 10,000-timer disable batch in a tock process on MariaDB,
// kills the process with SIGKILL mid-batch and starts it again with the same instance id:
// the batch completes and every timer was written exactly once (version 2), whatever the
// kill interrupted.
func TestBatchSurvivesKill9(t *testing.T) {
	t.Parallel()
	dsn := daotest.MySQLDSN(t)
	const n = 10_000
	env := func(addr string) []string {
		return []string{"TOCK_HTTP_ADDR=" + addr, "TOCK_MYSQL_DSN=" + dsn, "TOCK_INSTANCE_ID=batch-kill-1", "TOCK_LOG_LEVEL=warn"}
	}
	addr := freeAddr(t)
	p := startProc(t, t.TempDir(), addr, env(addr)...)
	c := client{t: t, base: p.base, http: &http.Client{Timeout: 10 * time.Second}}

	ctx := context.Background()
	store, err := dao.Open(ctx, dao.Options{MySQLDSN: dsn})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	app := uniqueApp("kill")
	seedEnabledTimers(t, store, app, n)

	var b batchJSON
	if code := c.do("POST", "/api/v1/batches", map[string]any{"operation": "disable", "target": map[string]any{"app": app}}, &b); code != http.StatusAccepted {
		t.Fatalf("create batch: %d", code)
	}
	// Kill once some tasks are done and many are not.
	waitUntil(t, time.Now().Add(2*time.Minute), "the batch to be under way", func() bool {
		c.do("GET", fmt.Sprintf("/api/v1/batches/%d", b.ID), nil, &b)
		return b.Counts["success"] >= 200
	})
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-p.exited
	p.exited <- nil
	if b.Counts["success"] == n {
		t.Fatal("the batch finished before the kill; nothing was proven")
	}
	t.Logf("killed with %v", b.Counts)

	addr2 := freeAddr(t)
	p2 := startProc(t, t.TempDir(), addr2, env(addr2)...)
	c2 := client{t: t, base: p2.base, http: &http.Client{Timeout: 10 * time.Second}}
	start := time.Now()
	waitUntil(t, time.Now().Add(5*time.Minute), "the batch to complete after the restart", func() bool {
		c2.do("GET", fmt.Sprintf("/api/v1/batches/%d", b.ID), nil, &b)
		return b.Status == "success" && b.DurationMS != nil
	})
	t.Logf("completed %s after the restart: %v", time.Since(start).Round(time.Millisecond), b.Counts)
	if b.Counts["success"] != n {
		t.Fatalf("counts %v", b.Counts)
	}
	var after int64
	written := map[int64]int{}
	for {
		page, err := store.ListTimers(ctx, dao.ListTimersParams{App: app, AfterID: after, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, tm := range page {
			if tm.Status != dao.StatusDisabled {
				t.Fatalf("timer %d is %s", tm.ID, tm.Status)
			}
			written[tm.Version-1]++
		}
		after = page[len(page)-1].ID
	}
	if written[1] != n {
		t.Fatalf("timers by number of writes: %v; want all %d written once", written, n)
	}
	if err := p2.stop(t); err != nil {
		t.Errorf("exit after SIGTERM: %v", err)
	}
}

// seedEnabledTimers inserts n enabled timers of app in bulk.
func seedEnabledTimers(t *testing.T, s *dao.Store, app string, n int) {
	t.Helper()
	ctx := context.Background()
	now := time.Now().UnixMilli()
	for start := 0; start < n; start += 500 {
		var q strings.Builder
		q.WriteString(`INSERT INTO timer (app, name, live_name, status, schedule, anchor_ms, callback, retry,
		request_hash, version, created_ms, updated_ms) VALUES `)
		var args []any
		for i := start; i < min(n, start+500); i++ {
			if i > start {
				q.WriteString(", ")
			}
			q.WriteString("(?, ?, ?, ?, ?, ?, ?, ?, '', 1, ?, ?)")
			name := fmt.Sprintf("t-%05d", i)
			args = append(args, app, name, name, dao.StatusEnabled, dao.JSONSpec(schedule.Spec{Every: "1h"}), now,
				dao.Callback{URL: "http://127.0.0.1:9/hook", Method: "POST", TimeoutMS: 1000},
				dao.RetryPolicy{MaxAttempts: 1, BackoffMS: 1000, MaxBackoffMS: 1000}, now, now)
		}
		if _, err := s.DB().ExecContext(ctx, q.String(), args...); err != nil {
			t.Fatalf("seed timers: %v", err)
		}
	}
}
