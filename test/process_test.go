package test

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
	binDir    string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// tockBinary builds cmd/tock once per test run.
func tockBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "tock-bin-")
		if buildErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "tock")
		out, err := exec.Command("go", "build", "-o", binPath, "../cmd/tock").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// proc is one tock process.
type proc struct {
	cmd    *exec.Cmd
	out    *syncBuffer
	base   string
	exited chan error
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

// cleanEnv is the environment without any TOCK_ variable, so a process sees only what the
// test gives it.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TOCK_") {
			env = append(env, kv)
		}
	}
	return env
}

func startProc(t *testing.T, dir, addr string, env ...string) *proc {
	t.Helper()
	cmd := exec.Command(tockBinary(t), "serve")
	cmd.Dir = dir
	cmd.Env = append(cleanEnv(), env...)
	p := &proc{cmd: cmd, out: &syncBuffer{}, base: "http://" + addr, exited: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("output of tock at %s:\n%s", addr, p.out.String())
		}
	})
	hc := &http.Client{Timeout: time.Second}
	waitUntil(t, time.Now().Add(30*time.Second), "tock at "+addr+" ready", func() bool {
		resp, err := hc.Get(p.base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	return p
}

func (p *proc) stop(t *testing.T) error {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.exited:
		p.exited <- err
		return err
	case <-time.After(20 * time.Second):
		t.Fatal("tock did not stop within 20s of SIGTERM")
		return nil
	}
}

func TestZeroConfigServeStartsEmbedded(t *testing.T) {
	dir := t.TempDir()
	var env []string
	addr := "127.0.0.1:8080"
	if ln, err := net.Listen("tcp", addr); err != nil {
		// Something else holds the default port on this machine; keep everything else default.
		addr = freeAddr(t)
		env = append(env, "TOCK_HTTP_ADDR="+addr)
		t.Logf("127.0.0.1:8080 is taken here; using %s", addr)
	} else {
		ln.Close()
	}
	p := startProc(t, dir, addr, env...)
	c := client{t: t, base: p.base, http: &http.Client{Timeout: 5 * time.Second}}
	var health map[string]any
	if code := c.do("GET", "/healthz", nil, &health); code != 200 {
		t.Fatalf("healthz %d", code)
	}
	out := p.out.String()
	for _, want := range []string{"listening on http://" + addr, filepath.Join("tock-data", "tock.db"), "TOCK_MYSQL_DSN", "TOCK_REDIS_ADDR"} {
		if !strings.Contains(out, want) {
			t.Errorf("start-up output lacks %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "tock-data", "tock.db")); err != nil {
		t.Errorf("no SQLite file in ./tock-data: %v", err)
	}
	if err := p.stop(t); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, p.out.String())
	}
}

// TestThreeProcessesShareTheWork runs three tock processes over one MariaDB and Redis, across a
// minute boundary so that new slices are contended by all three: every occurrence fires once,
// and the executions are spread over the instances.
func TestThreeProcessesShareTheWork(t *testing.T) {
	b := realBackend(t)
	recv := newReceiver(t)
	var apis []client
	var procs []*proc
	for i := 1; i <= 3; i++ {
		addr := freeAddr(t)
		p := startProc(t, t.TempDir(), addr,
			"TOCK_HTTP_ADDR="+addr, "TOCK_MYSQL_DSN="+b.mysqlDSN, "TOCK_REDIS_ADDR="+b.redisAddr[0],
			"TOCK_REDIS_KEY_PREFIX="+b.keyPrefix, fmt.Sprintf("TOCK_INSTANCE_ID=proc-%d", i), "TOCK_LOG_LEVEL=warn",
			"TOCK_ENGINE_MIGRATE_STEP=1m", "TOCK_ENGINE_MIGRATE_WINDOW=2m")
		procs = append(procs, p)
		apis = append(apis, client{t: t, base: p.base, http: &http.Client{Timeout: 10 * time.Second}})
	}
	_, instances := runFiring(t, apis, recv, scenario{periodic: 60, oneShots: 20, runUntil: func(created time.Time) time.Time {
		// Past the next minute boundary, with a few seconds of the new minute.
		return created.Truncate(time.Minute).Add(time.Minute + 8*time.Second)
	}})
	t.Logf("executions by instance: %v", instances)
	busy := 0
	for _, k := range sortedKeys(instances) {
		if instances[k] > 0 {
			busy++
		}
	}
	if busy < 2 {
		t.Errorf("work was not shared: executions by instance %v", instances)
	}
	for _, p := range procs {
		if err := p.stop(t); err != nil {
			t.Errorf("exit after SIGTERM: %v", err)
		}
	}
}
