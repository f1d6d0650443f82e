package conf

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tock.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	c, err := Load("", nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTP.Addr != "127.0.0.1:8080" || c.DataDir != "./tock-data" || c.Engine.Buckets != 8 ||
		c.Engine.MigrateWindow.D() != 2*time.Hour || c.Redis.KeyPrefix != "tock:" {
		t.Fatalf("defaults: %+v", c)
	}
	if sqlite, redis := c.Embedded(); !sqlite || !redis {
		t.Fatal("no DSN and no Redis address must select the embedded stores")
	}
}

func TestFileThenEnvOverride(t *testing.T) {
	t.Parallel()
	p := writeFile(t, "http:\n  addr: 127.0.0.1:9000\nengine:\n  buckets: 4\n  migrate_step: 30m\n  migrate_window: 1h\n")
	c, err := Load(p, []string{"TOCK_ENGINE_BUCKETS=16", "TOCK_REDIS_ADDR=10.0.0.1:6379, 10.0.0.2:6379", "TOCK_MYSQL_DSN=u:p@tcp(db:3306)/tock", "PATH=/bin"})
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTP.Addr != "127.0.0.1:9000" || c.Engine.Buckets != 16 || c.Engine.MigrateStep.D() != 30*time.Minute {
		t.Fatalf("got %+v", c)
	}
	if len(c.Redis.Addr) != 2 || c.Redis.Addr[1] != "10.0.0.2:6379" || c.MySQL.DSN != "u:p@tcp(db:3306)/tock" {
		t.Fatalf("env not applied: %+v", c)
	}
}

func TestErrorsNameTheKey(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, file string
		env        []string
		wantKey    string
	}{
		{"UnknownKey", "http:\n  adr: x\n", nil, "adr"},
		{"BadDuration", "engine:\n  migrate_step: soon\n", nil, "soon"},
		{"BadAddr", "http:\n  addr: nowhere\n", nil, "http.addr"},
		{"BucketsZero", "", []string{"TOCK_ENGINE_BUCKETS=0"}, "engine.buckets"},
		{"EnvNotInt", "", []string{"TOCK_ENGINE_POOL_SIZE=many"}, "TOCK_ENGINE_POOL_SIZE"},
		{"EnvBadDuration", "", []string{"TOCK_HTTP_SHUTDOWN_TIMEOUT=10"}, "http.shutdown_timeout"},
		{"WindowShorterThanStep", "engine:\n  migrate_step: 1h\n  migrate_window: 30m\n", nil, "engine.migrate_window"},
		{"ClaimAheadTooLong", "", []string{"TOCK_ENGINE_CLAIM_AHEAD=3s"}, "engine.claim_ahead"},
		{"ClaimAheadPastHeartbeat", "", []string{"TOCK_ENGINE_CLAIM_AHEAD=500ms", "TOCK_ENGINE_HEARTBEAT_INTERVAL=200ms"}, "engine.claim_ahead"},
		{"BadLogLevel", "", []string{"TOCK_LOG_LEVEL=loud"}, "log.level"},
		{"PrefixWithBrace", "", []string{"TOCK_REDIS_KEY_PREFIX={x}"}, "redis.key_prefix"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := ""
			if tc.file != "" {
				p = writeFile(t, tc.file)
			}
			_, err := Load(p, tc.env)
			if err == nil || !strings.Contains(err.Error(), tc.wantKey) {
				t.Fatalf("err = %v, want it to name %q", err, tc.wantKey)
			}
		})
	}
}

func TestExampleFileLoadsAndListsEveryKey(t *testing.T) {
	t.Parallel()
	c, err := Load("tock.example.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTP.Addr != Default().HTTP.Addr {
		t.Fatalf("example changes a default: %+v", c.HTTP)
	}
	raw, _ := os.ReadFile("tock.example.yaml")
	for _, key := range EnvVars() {
		leaf := key[strings.LastIndex(key, ".")+1:]
		if !strings.Contains(string(raw), leaf+":") {
			t.Errorf("tock.example.yaml does not document %s", key)
		}
	}
}
