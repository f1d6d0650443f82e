package bench

import (
	"bufio"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	_ "github.com/go-sql-driver/mysql" // SHOW GLOBAL STATUS
	"github.com/jonboulle/clockwork"
	"github.com/redis/go-redis/v9"

	"github.com/tockd/tock/app"
	"github.com/tockd/tock/conf"
)

// TargetInfo describes what was measured.
type TargetInfo struct {
	// Mode is "embedded" (a tock started in the bench process) or "url".
	Mode    string   `json:"mode"`
	URLs    []string `json:"urls"`
	Version string   `json:"version,omitempty"`
	// Store and Index: sqlite|mysql and miniredis|redis; "unknown" when not known.
	Store string `json:"store"`
	Index string `json:"index"`
	// MigrateStep and MigrateWindow the target stamps with; "unknown" for a URL target.
	MigrateStep   string `json:"migrate_step"`
	MigrateWindow string `json:"migrate_window"`
	PoolSize      int    `json:"pool_size,omitempty"`
	Buckets       int    `json:"buckets,omitempty"`
	RedisPrefix   string `json:"redis_key_prefix,omitempty"`
	// CountersFrom names where MySQL and Redis operation counters were read, if anywhere.
	MySQLCounters bool `json:"mysql_counters"`
	RedisCounters bool `json:"redis_counters"`
}

// Name is the short form used in result file names: embedded, embedded-mysql-redis, url, ...
func (t TargetInfo) Name() string {
	if t.Mode != "embedded" {
		return "url"
	}
	switch {
	case t.Store == "mysql" && t.Index == "redis":
		return "embedded-mysql-redis"
	case t.Store == "mysql":
		return "embedded-mysql"
	case t.Index == "redis":
		return "embedded-redis"
	}
	return "embedded"
}

// target is the tock under test plus the optional MySQL and Redis counter readers.
type target struct {
	info    TargetInfo
	bases   []string
	app     *app.App // embedded only
	dataDir string   // embedded temp dir we own
	mysql   *sql.DB
	redis   *redis.Client
	log     *slog.Logger
}

func openTarget(ctx context.Context, o Options) (*target, error) {
	t := &target{log: o.Log}
	if len(o.URLs) == 0 {
		if err := t.startEmbedded(ctx, o); err != nil {
			t.close()
			return nil, err
		}
	} else {
		t.info = TargetInfo{Mode: "url", URLs: o.URLs, Store: "unknown", Index: "unknown", MigrateStep: "unknown", MigrateWindow: "unknown"}
		for _, u := range o.URLs {
			t.bases = append(t.bases, strings.TrimRight(u, "/"))
		}
	}
	if o.MySQLDSN != "" {
		db, err := sql.Open("mysql", o.MySQLDSN)
		if err != nil {
			t.close()
			return nil, fmt.Errorf("bench: open mysql for counters: %w", err)
		}
		db.SetMaxOpenConns(2)
		t.mysql = db
		if _, err := t.mysqlCounters(ctx); err != nil {
			t.close()
			return nil, err
		}
		t.info.MySQLCounters = true
	}
	if o.RedisAddr != "" {
		t.redis = redis.NewClient(&redis.Options{Addr: o.RedisAddr})
		if _, err := t.redisCommands(ctx); err != nil {
			t.close()
			return nil, err
		}
		t.info.RedisCounters = true
	}
	return t, nil
}

// startEmbedded runs a tock in this process: SQLite in a temp dir and miniredis unless a
// MySQL DSN or Redis address is given; the real clock.
func (t *target) startEmbedded(ctx context.Context, o Options) error {
	cfg := conf.Default()
	dir := o.DataDir
	if dir == "" {
		d, err := os.MkdirTemp("", "tock-bench-")
		if err != nil {
			return fmt.Errorf("bench: temp data dir: %w", err)
		}
		dir, t.dataDir = d, d
	}
	cfg.DataDir = dir
	cfg.InstanceID = fmt.Sprintf("bench-%d", os.Getpid())
	cfg.HTTP.Addr = "127.0.0.1:0"
	cfg.HTTP.ShutdownTimeout = conf.Duration(5 * time.Second)
	cfg.MySQL.DSN = o.MySQLDSN
	if o.RedisAddr != "" {
		cfg.Redis.Addr = []string{o.RedisAddr}
		// A prefix of our own: slices, locks and markers do not mix with another tock or a
		// test on the same Redis, and can be removed afterwards.
		cfg.Redis.KeyPrefix = o.RedisPrefix
		if cfg.Redis.KeyPrefix == "" {
			cfg.Redis.KeyPrefix = "tockbench:" + randomHex(4) + ":"
		}
	}
	if o.PoolSize > 0 {
		cfg.Engine.PoolSize = o.PoolSize
	}
	if o.Buckets > 0 {
		cfg.Engine.Buckets = o.Buckets
	}
	cfg.Engine.MigrateStep = conf.Duration(o.MigrateStep)
	cfg.Engine.MigrateWindow = conf.Duration(o.MigrateWindow)
	cfg.Log.Level = "warn"
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("bench: embedded tock config: %w", err)
	}
	log := slog.New(minLevel{Handler: o.Log.Handler(), min: slog.LevelWarn}).With("component", "tock")
	a, err := app.New(ctx, cfg, log, clockwork.NewRealClock())
	if err != nil {
		return fmt.Errorf("bench: embedded tock: %w", err)
	}
	if err := a.Start(ctx); err != nil {
		a.Stop()
		return fmt.Errorf("bench: start embedded tock: %w", err)
	}
	t.app = a
	t.bases = []string{"http://" + a.Addr()}
	sqlite, miniredis := cfg.Embedded()
	t.info = TargetInfo{
		Mode: "embedded", URLs: t.bases, Version: app.Version, Store: "mysql", Index: "redis",
		MigrateStep: cfg.Engine.MigrateStep.D().String(), MigrateWindow: cfg.Engine.MigrateWindow.D().String(),
		PoolSize: cfg.Engine.PoolSize, Buckets: cfg.Engine.Buckets,
	}
	if sqlite {
		t.info.Store = "sqlite"
	}
	if miniredis {
		t.info.Index = "miniredis"
	} else {
		t.info.RedisPrefix = cfg.Redis.KeyPrefix
	}
	return nil
}

// nodes are the distinct base URLs: a node given twice is measured once.
func (t *target) nodes() []string {
	var out []string
	seen := map[string]bool{}
	for _, b := range t.bases {
		if !seen[b] {
			seen[b] = true
			out = append(out, b)
		}
	}
	return out
}

// describe fills what a URL target tells about itself (store and index from /readyz).
func (t *target) describe(ctx context.Context, c *apiClient) error {
	for _, b := range t.bases {
		checks, err := c.readyz(ctx, b, 30*time.Second)
		if err != nil {
			return err
		}
		if t.info.Mode == "url" {
			for name := range checks {
				switch name {
				case "mysql", "sqlite":
					t.info.Store = name
				case "redis":
					t.info.Index = "redis (embedded or external)"
				}
			}
		}
	}
	if t.info.Mode == "url" {
		t.info.Version = c.version(ctx, t.bases[0])
	}
	return nil
}

// close stops the embedded tock and removes what the bench created besides timers: the
// temp data dir and the Redis keys under the run's own prefix.
func (t *target) close() {
	if t.app != nil {
		t.app.Stop()
		t.app = nil
	}
	if t.redis != nil && t.info.RedisPrefix != "" {
		t.removePrefix(t.info.RedisPrefix)
	}
	if t.dataDir != "" {
		_ = os.RemoveAll(t.dataDir)
	}
	if t.mysql != nil {
		_ = t.mysql.Close()
	}
	if t.redis != nil {
		_ = t.redis.Close()
	}
}

func (t *target) removePrefix(prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	iter := t.redis.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var keys []string
	flush := func() {
		if len(keys) > 0 {
			if err := t.redis.Unlink(ctx, keys...).Err(); err != nil {
				t.log.Warn("remove bench redis keys", "prefix", prefix, "err", err)
			}
			keys = keys[:0]
		}
	}
	for iter.Next(ctx) {
		if keys = append(keys, iter.Val()); len(keys) >= 1000 {
			flush()
		}
	}
	flush()
	if err := iter.Err(); err != nil {
		t.log.Warn("scan bench redis keys", "prefix", prefix, "err", err)
	}
}

// mysqlCounters reads Questions and the Com_* counters of SHOW GLOBAL STATUS.
func (t *target) mysqlCounters(ctx context.Context) (map[string]int64, error) {
	rows, err := t.mysql.QueryContext(ctx, "SHOW GLOBAL STATUS WHERE Variable_name = 'Questions' OR Variable_name LIKE 'Com\\_%'")
	if err != nil {
		return nil, fmt.Errorf("bench: mysql SHOW GLOBAL STATUS: %w", err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var name, val string
		if err := rows.Scan(&name, &val); err != nil {
			return nil, fmt.Errorf("bench: mysql status row: %w", err)
		}
		if v, err := strconv.ParseInt(val, 10, 64); err == nil {
			out[name] = v
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("bench: mysql status rows: %w", err)
	}
	return out, nil
}

// redisCommands reads total_commands_processed from INFO stats.
func (t *target) redisCommands(ctx context.Context) (int64, error) {
	info, err := t.redis.Info(ctx, "stats").Result()
	if err != nil {
		return 0, fmt.Errorf("bench: redis INFO stats: %w", err)
	}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "total_commands_processed:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("bench: redis total_commands_processed %q: %w", v, err)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("bench: redis INFO stats has no total_commands_processed")
}

// snapshot is the target's counters at one instant.
type snapshot struct {
	At    time.Time
	Nodes []processMetrics
	MySQL map[string]int64
	Redis int64
	// RedisOK: Redis was read (a zero counter is possible).
	RedisOK bool
}

// snap reads every counter it can; a failed read leaves that part empty and is logged.
func (t *target) snap(ctx context.Context, c *apiClient) snapshot {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s := snapshot{At: time.Now()}
	for _, b := range t.nodes() {
		m, err := c.scrapeProcess(ctx, b)
		if err != nil {
			t.log.Warn("metrics scrape failed", "url", b, "err", err)
		}
		s.Nodes = append(s.Nodes, m)
	}
	if t.mysql != nil {
		m, err := t.mysqlCounters(ctx)
		if err != nil {
			t.log.Warn("mysql counters", "err", err)
		}
		s.MySQL = m
	}
	if t.redis != nil {
		n, err := t.redisCommands(ctx)
		if err != nil {
			t.log.Warn("redis counters", "err", err)
		} else {
			s.Redis, s.RedisOK = n, true
		}
	}
	return s
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// minLevel drops records below min: the embedded tock logs warnings and errors only, so
// its per-start info lines do not mix with the bench's progress.
type minLevel struct {
	slog.Handler
	min slog.Level
}

func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h minLevel) WithAttrs(as []slog.Attr) slog.Handler {
	return minLevel{Handler: h.Handler.WithAttrs(as), min: h.min}
}

func (h minLevel) WithGroup(name string) slog.Handler {
	return minLevel{Handler: h.Handler.WithGroup(name), min: h.min}
}
