package app

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/tockd/tock/conf"
)

// TestAppServesEverythingAndStopsCleanly checks the wiring: API, batches, admin, metrics.
func TestAppServesEverythingAndStopsCleanly(t *testing.T) {
	cfg := conf.Default()
	cfg.DataDir = t.TempDir()
	cfg.HTTP.Addr = "127.0.0.1:0"
	a, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler), clockwork.NewRealClock())
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	get := func(path string) (int, string) {
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + a.Addr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	checks := []struct {
		path string
		code int
		want string
	}{
		{"/metrics", 200, "tock_build_info{version="},
		{"/metrics", 200, "go_goroutines"},
		{"/readyz", 200, `"sqlite":"ok"`},
		{"/api/v1/batches?app=none", 200, `"items":[]`},
		{"/api/v1/admin/compensation", 200, `"interval"`},
		{"/api/v1/nothing", 404, `"code":"not_found"`},
	}
	for _, c := range checks {
		if code, body := get(c.path); code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("GET %s: %d %.400s; want %d containing %s", c.path, code, body, c.code, c.want)
		}
	}
	a.Stop()
	a.Stop() // idempotent
	if err := <-a.Served(); err != nil {
		t.Fatalf("server ended with %v", err)
	}
}
