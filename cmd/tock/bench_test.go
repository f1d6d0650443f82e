package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tock bench runs end to end from the command line: a tiny steady workload on an embedded
// tock, the table on stdout, the JSON report on disk, exit 0 when nothing was missed or early.
func TestBenchCommandTinySteady(t *testing.T) {
	out := filepath.Join(t.TempDir(), "report.json")
	var stdout, stderr bytes.Buffer
	code := run([]string{"bench", "--timers", "5", "--duration", "2s", "--grace", "2s", "--warmup", "1s",
		"--log-level", "warn", "--json", out, "steady"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	if !strings.Contains(stdout.String(), "result: PASS") {
		t.Fatalf("stdout lacks the verdict:\n%s", stdout.String())
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rep map[string]any
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatalf("report is not JSON: %v", err)
	}
	if code := run([]string{"bench", "no-such-workload"}, &stdout, &stderr); code != 2 {
		t.Fatalf("unknown workload: exit %d, want 2", code)
	}
}
