package test

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
)

// countingReceiver answers 204 and records every delivery (first arrival per key, count).
type countingReceiver struct {
	srv   *httptest.Server
	mu    sync.Mutex
	first map[string]time.Time
	count map[string]int
}

func newCountingReceiver(t *testing.T) *countingReceiver {
	r := &countingReceiver{first: map[string]time.Time{}, count: map[string]int{}}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		now := time.Now()
		key := req.Header.Get("Idempotency-Key")
		r.mu.Lock()
		if _, ok := r.first[key]; !ok {
			r.first[key] = now
		}
		r.count[key]++
		r.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// stats: duplicate deliveries (beyond the first of each key) and the worst lateness of first
// deliveries of occurrences scheduled in [from, to).
func (r *countingReceiver) stats(from, to time.Time) (dups int, worst time.Duration, worstKey string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, n := range r.count {
		dups += n - 1
		var id, ms int64
		if _, err := fmt.Sscanf(k, "%d:%d", &id, &ms); err != nil {
			continue
		}
		at := time.UnixMilli(ms)
		if at.Before(from) || !at.Before(to) {
			continue
		}
		if l := r.first[k].Sub(at); l > worst {
			worst, worstKey = l, k
		}
	}
	return dups, worst, worstKey
}

// relSetup is a reliability run: the stores and the tock processes over them.
type relSetup struct {
	dsn, redisAddr, prefix string
	procs                  []*proc
	apis                   []client
	timers                 []relTimer
}

type relTimer struct {
	id    int64
	first time.Time
}

func (s *relSetup) start(t *testing.T, i int, extra ...string) {
	t.Helper()
	addr := freeAddr(t)
	env := append([]string{"TOCK_HTTP_ADDR=" + addr, "TOCK_MYSQL_DSN=" + s.dsn, "TOCK_REDIS_ADDR=" + s.redisAddr,
		"TOCK_REDIS_KEY_PREFIX=" + s.prefix, fmt.Sprintf("TOCK_INSTANCE_ID=rel-%d-%d", i, time.Now().UnixNano()%100000),
		"TOCK_LOG_LEVEL=warn", "TOCK_ENGINE_MIGRATE_STEP=1m", "TOCK_ENGINE_MIGRATE_WINDOW=2m",
		"TOCK_HTTP_SHUTDOWN_TIMEOUT=10s"}, extra...)
	p := startProc(t, t.TempDir(), addr, env...)
	c := client{t: t, base: p.base, http: &http.Client{Timeout: 10 * time.Second}}
	if i < len(s.procs) {
		s.procs[i], s.apis[i] = p, c
	} else {
		s.procs, s.apis = append(s.procs, p), append(s.apis, c)
	}
}

// createTimers creates n every-second timers calling url.
func (s *relSetup) createTimers(t *testing.T, n int, url string) {
	t.Helper()
	app := uniqueApp("rel")
	for i := range n {
		var tj timerJSON
		body := map[string]any{"app": app, "name": fmt.Sprintf("t-%03d", i), "schedule": map[string]any{"every": "1s"},
			"callback": map[string]any{"url": url, "method": "POST"}}
		if code := s.apis[0].do("POST", "/api/v1/timers", body, &tj); code != 201 {
			t.Fatalf("create timer %d: %d", i, code)
		}
		s.timers = append(s.timers, relTimer{id: tj.ID, first: mustParseTime(t, *tj.NextFireAt)})
	}
}

// disableAll disables every timer and returns when the first disable call started.
func (s *relSetup) disableAll(t *testing.T, api client) time.Time {
	t.Helper()
	start := time.Now()
	for _, tm := range s.timers {
		var tj timerJSON
		if code := api.do("POST", fmt.Sprintf("/api/v1/timers/%d/disable", tm.id), nil, &tj); code != 200 {
			t.Fatalf("disable %d: %d", tm.id, code)
		}
	}
	return start
}

// verify reads timer_task directly: every occurrence of every timer from its first to
// before `until` must have exactly one execution, succeeded. It waits (up to settle) for
// executions still pending or running (retries, takeovers). It returns the number expected
// and the number missing or not succeeded.
func (s *relSetup) verify(t *testing.T, until time.Time, settle time.Duration) (expected, missed int) {
	t.Helper()
	db, err := sql.Open("mysql", s.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	deadline := time.Now().Add(settle)
	for {
		expected, missed = 0, 0
		var bad []string
		for _, tm := range s.timers {
			rows, err := db.Query("SELECT scheduled_ms, status FROM timer_task WHERE timer_id = ? AND scheduled_ms < ?", tm.id, until.UnixMilli())
			if err != nil {
				t.Fatal(err)
			}
			got := map[int64]string{}
			for rows.Next() {
				var ms int64
				var st string
				if err := rows.Scan(&ms, &st); err != nil {
					t.Fatal(err)
				}
				got[ms] = st
			}
			rows.Close()
			for at := tm.first; at.Before(until); at = at.Add(time.Second) {
				expected++
				if st := got[at.UnixMilli()]; st != "succeeded" {
					missed++
					if len(bad) < 10 {
						bad = append(bad, fmt.Sprintf("%d:%d=%q", tm.id, at.UnixMilli(), st))
					}
				}
			}
		}
		if missed == 0 || time.Now().After(deadline) {
			if missed > 0 {
				t.Logf("not succeeded (first 10): %v", bad)
			}
			return expected, missed
		}
		time.Sleep(time.Second)
	}
}

// sleepUntilSecondOfMinute waits until the wall clock's second in the minute is in [lo, hi].
func sleepUntilSecondOfMinute(lo, hi int) {
	for {
		s := time.Now().Second()
		if s >= lo && s <= hi {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	_, p, _ := net.SplitHostPort(freeAddr(t))
	n, _ := strconv.Atoi(p)
	return n
}

// child is a helper server process (redis-server, mariadbd) owned by the test.
type child struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

func startChild(t *testing.T, logPath, name string, args ...string) *child {
	t.Helper()
	cmd := exec.Command(name, args...)
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Skipf("%s not startable here: %v", name, err)
	}
	c := &child{cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); f.Close(); close(c.exited) }()
	t.Cleanup(func() { c.kill(syscall.SIGKILL) })
	return c
}

// kill signals the child (by its pid) and waits for it to exit.
func (c *child) kill(sig syscall.Signal) {
	select {
	case <-c.exited:
		return
	default:
	}
	_ = c.cmd.Process.Signal(sig)
	select {
	case <-c.exited:
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
}

func startPrivateRedis(t *testing.T, port int) *child {
	t.Helper()
	c := startChild(t, filepath.Join(t.TempDir(), "redis.log"), "redis-server",
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--daemonize", "no")
	rdb := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port)})
	defer rdb.Close()
	waitUntil(t, time.Now().Add(15*time.Second), "private redis up", func() bool {
		return rdb.Ping(context.Background()).Err() == nil
	})
	return c
}

// startPrivateMariaDB starts mariadbd on port over datadir (initialised when new).
func startPrivateMariaDB(t *testing.T, dir string, port int) *child {
	t.Helper()
	data := filepath.Join(dir, "data")
	if _, err := os.Stat(data); os.IsNotExist(err) {
		out, err := exec.Command("mariadb-install-db", "--no-defaults", "--datadir="+data,
			"--auth-root-authentication-method=normal", "--skip-test-db", "--user="+currentUser()).CombinedOutput()
		if err != nil {
			t.Skipf("mariadb-install-db: %v\n%s", err, out)
		}
	}
	c := startChild(t, filepath.Join(dir, fmt.Sprintf("mariadbd-%d.log", time.Now().UnixNano())), "mariadbd", "--no-defaults",
		"--datadir="+data, fmt.Sprintf("--port=%d", port), "--bind-address=127.0.0.1", "--socket="+filepath.Join(dir, "sock"),
		"--user="+currentUser(), "--skip-grant-tables", "--skip-log-bin", "--innodb-buffer-pool-size=64M")
	db, _ := sql.Open("mysql", fmt.Sprintf("root@tcp(127.0.0.1:%d)/", port))
	defer db.Close()
	waitUntil(t, time.Now().Add(60*time.Second), "private mariadbd up", func() bool { return db.Ping() == nil })
	if _, err := db.Exec("CREATE DATABASE IF NOT EXISTS tock"); err != nil {
		t.Fatal(err)
	}
	return c
}

func currentUser() string {
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	if os.Getuid() == 0 {
		return "root"
	}
	return strconv.Itoa(os.Getuid())
}
