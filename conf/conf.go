// Package conf holds tock's one configuration struct, its defaults, the YAML file format and
// the TOCK_* environment overrides.
//
// Precedence, lowest first: defaults, the YAML file (--config), environment variables. The
// environment variable of a field is TOCK_ followed by its YAML path in upper case joined by
// underscores: http.addr is TOCK_HTTP_ADDR, engine.buckets is TOCK_ENGINE_BUCKETS.
package conf

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Config is the whole configuration of one tock process.
type Config struct {
	// InstanceID names this process in execution records and logs. Default: hostname-pid.
	InstanceID string `yaml:"instance_id"`
	// DataDir is where the embedded stores keep their files. Default: ./tock-data.
	DataDir string     `yaml:"data_dir"`
	HTTP    HTTPConfig `yaml:"http"`
	MySQL   MySQL      `yaml:"mysql"`
	Redis   Redis      `yaml:"redis"`
	Engine  Engine     `yaml:"engine"`
	Log     Log        `yaml:"log"`
	// Compensation configures the loop that re-drives missed and stuck work (compensator).
	Compensation Compensation `yaml:"compensation"`
	// Batch configures the runner of batch operations over many timers (batch).
	Batch Batch `yaml:"batch"`
}

// HTTPConfig configures the REST API listener.
type HTTPConfig struct {
	// Addr is the host:port the API listens on. Default: 127.0.0.1:8080.
	Addr string `yaml:"addr"`
	// ShutdownTimeout bounds how long a graceful stop waits for requests and callbacks in flight.
	// Default: 10s.
	ShutdownTimeout Duration `yaml:"shutdown_timeout"`
}

// MySQL configures the source-of-truth store. An empty DSN selects embedded SQLite in DataDir.
type MySQL struct {
	// DSN in go-sql-driver/mysql form, e.g. "tock:secret@tcp(127.0.0.1:3306)/tock".
	// Default: empty (embedded SQLite at <data_dir>/tock.db).
	DSN string `yaml:"dsn"`
	// MaxOpenConns caps the connection pool. Default: 32.
	MaxOpenConns int `yaml:"max_open_conns"`
}

// Redis configures the hot index. No address selects an in-process miniredis.
type Redis struct {
	// Addr is one or more comma-separated host:port: one for standalone, several for Cluster,
	// Sentinel addresses when MasterName is set. Default: empty (embedded miniredis).
	Addr []string `yaml:"addr"`
	// MasterName selects Sentinel mode. Default: empty.
	MasterName string `yaml:"master_name"`
	// Username and Password for Redis AUTH. Default: empty.
	Username string `yaml:"username"`
	Password string `yaml:"password"`
	// DB selects the database in standalone mode. Default: 0.
	DB int `yaml:"db"`
	// KeyPrefix starts every key tock writes, so several deployments can share one Redis.
	// Default: "tock:".
	KeyPrefix string `yaml:"key_prefix"`
}

// Engine configures the migrator, scheduler, trigger and executor.
type Engine struct {
	// Disabled runs the API without firing timers (for API-only instances). Default: false.
	Disabled bool `yaml:"disabled"`
	// Buckets splits each minute slice so several instances and triggers share it. Default: 8.
	Buckets int `yaml:"buckets"`
	// PoolSize is the number of executor goroutines (ants pool); also sizes the HTTP
	// connection pool. Default: 256.
	PoolSize int `yaml:"pool_size"`
	// MigrateStep is how often the migrator moves the window, aligned to the clock; each step
	// stamps only the time newly entering the window. Default: 1m.
	MigrateStep Duration `yaml:"migrate_step"`
	// MigrateWindow is how far ahead occurrences are stamped into Redis; at least MigrateStep.
	// Default: 2h.
	MigrateWindow Duration `yaml:"migrate_window"`
	// ResponseExcerptBytes bounds the callback response or error kept per execution. Default: 1024.
	ResponseExcerptBytes int `yaml:"response_excerpt_bytes"`
	// HeartbeatInterval is how often an instance renews the lease of each execution in
	// flight. Default: 2s.
	HeartbeatInterval Duration `yaml:"heartbeat_interval"`
	// MissedHeartbeats: an execution not renewed for this many heartbeat intervals has lost
	// its owner and is taken over by another instance. Default: 3.
	MissedHeartbeats int `yaml:"missed_heartbeats"`
	// RetryPoll is how often each instance claims due retries and takes over stale
	// executions. Default: 1s.
	RetryPoll Duration `yaml:"retry_poll"`
	// SliceLeaseTTL is the lease on a slice its owner renews while it runs: a crashed
	// owner's slice is taken over within it. Default: 5s.
	SliceLeaseTTL Duration `yaml:"slice_lease_ttl"`
	// SliceLeaseRenew is how often the slice lease is renewed; under half of
	// slice_lease_ttl. Default: 1s.
	SliceLeaseRenew Duration `yaml:"slice_lease_renew"`
	// ResultWriteTimeout bounds how long a callback's result is retried against a failing
	// MySQL before the occurrence is left to be run again. Default: 30s.
	ResultWriteTimeout Duration `yaml:"result_write_timeout"`
	// ClaimAhead hands each occurrence to the executor this long before its time: it is
	// claimed in the store at once and called at its millisecond, so the store's latency
	// does not make callbacks late. 0 claims at the due time.
	ClaimAhead Duration `yaml:"claim_ahead"`
}

// Batch configures batch operations: a bounded queue feeding a fixed worker pool.
type Batch struct {
	// QueueSize bounds the tasks waiting for a worker. Default: 1000.
	QueueSize int `yaml:"queue_size"`
	// Workers is the fixed number of worker goroutines. Default: 32.
	Workers int `yaml:"workers"`
	// ScanInterval is how often unfinished batches are re-dispatched and dead runners' tasks
	// taken back. Default: 20s.
	ScanInterval Duration `yaml:"scan_interval"`
	// MaxRetries: a task that timed out or failed transiently runs again this many times
	// before it fails. Default: 2.
	MaxRetries int `yaml:"max_retries"`
	// MaxTargets bounds the timers of one batch. Default: 100000.
	MaxTargets int `yaml:"max_targets"`
}

// Compensation configures the compensation loop and the catch-up after downtime.
type Compensation struct {
	// Grace is how long after the instance starts the loop waits before its first pass
	// (start-up delays are not mistaken for lost work). Default: 10m.
	Grace Duration `yaml:"grace"`
	// Quiet is how long after the last takeover of executions the loop waits, so it does not
	// compete with takeovers in progress. Default: 1m.
	Quiet Duration `yaml:"quiet"`
	// FastInterval is the time between passes while passes find work. Default: 10s.
	FastInterval Duration `yaml:"fast_interval"`
	// SlowInterval is the time between passes once a pass finds nothing. Default: 10m.
	SlowInterval Duration `yaml:"slow_interval"`
	// StuckAfter: an execution pending or running unchanged this long is re-driven. Default: 2m.
	StuckAfter Duration `yaml:"stuck_after"`
	// CatchUpWindow: missed occurrences younger than this are handled per the timer's misfire
	// policy; older ones are recorded as missed. Default: 1h.
	CatchUpWindow Duration `yaml:"catch_up_window"`
	// Rate caps re-driven occurrences per second. Default: 100.
	Rate int `yaml:"rate"`
	// MaxPerPass caps the occurrences one pass re-drives or records; the rest wait for the
	// next (fast) pass. Default: 10000.
	MaxPerPass int `yaml:"max_per_pass"`
}

// Log configures log/slog output on stderr.
type Log struct {
	// Level is debug, info, warn or error. Default: info.
	Level string `yaml:"level"`
	// Format is text or json. Default: text.
	Format string `yaml:"format"`
}

// Default returns the configuration used when nothing is set.
func Default() Config {
	host, _ := os.Hostname()
	if host == "" {
		host = "tock"
	}
	return Config{
		InstanceID: fmt.Sprintf("%s-%d", host, os.Getpid()),
		DataDir:    "./tock-data",
		HTTP:       HTTPConfig{Addr: "127.0.0.1:8080", ShutdownTimeout: Duration(10 * time.Second)},
		MySQL:      MySQL{MaxOpenConns: 32},
		Redis:      Redis{KeyPrefix: "tock:"},
		Engine: Engine{
			Buckets:              8,
			PoolSize:             1024,
			MigrateStep:          Duration(time.Minute),
			MigrateWindow:        Duration(2 * time.Hour),
			ResponseExcerptBytes: 1024,
			HeartbeatInterval:    Duration(2 * time.Second),
			MissedHeartbeats:     3,
			RetryPoll:            Duration(time.Second),
			SliceLeaseTTL:        Duration(5 * time.Second),
			SliceLeaseRenew:      Duration(time.Second),
			ResultWriteTimeout:   Duration(30 * time.Second),
			ClaimAhead:           Duration(100 * time.Millisecond),
		},
		Log:   Log{Level: "info", Format: "text"},
		Batch: Batch{QueueSize: 1000, Workers: 32, ScanInterval: Duration(20 * time.Second), MaxRetries: 2, MaxTargets: 100000},
		Compensation: Compensation{
			Grace:         Duration(10 * time.Minute),
			Quiet:         Duration(time.Minute),
			FastInterval:  Duration(10 * time.Second),
			SlowInterval:  Duration(10 * time.Minute),
			StuckAfter:    Duration(2 * time.Minute),
			CatchUpWindow: Duration(time.Hour),
			Rate:          100,
			MaxPerPass:    10000,
		},
	}
}

// Load builds the configuration from defaults, the optional YAML file at path and the
// environment (as returned by os.Environ). Any unknown key or invalid value is an error that
// names the key.
func Load(path string, environ []string) (Config, error) {
	cfg := Default()
	if path != "" {
		raw, err := os.ReadFile(path)
		if err != nil {
			return Config{}, fmt.Errorf("conf: read %s: %w", path, err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(raw))
		dec.KnownFields(true)
		if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
			return Config{}, fmt.Errorf("conf: %s: %w", path, err)
		}
	}
	if err := applyEnv(&cfg, environ); err != nil {
		return Config{}, err
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// Validate reports the first invalid field by its YAML key.
func (c Config) Validate() error {
	bad := func(key, why string) error { return fmt.Errorf("conf: invalid %s: %s", key, why) }
	if strings.TrimSpace(c.InstanceID) == "" {
		return bad("instance_id", "must not be empty")
	}
	if c.DataDir == "" {
		return bad("data_dir", "must not be empty")
	}
	if _, _, err := net.SplitHostPort(c.HTTP.Addr); err != nil {
		return bad("http.addr", fmt.Sprintf("%q is not host:port", c.HTTP.Addr))
	}
	if c.HTTP.ShutdownTimeout < 0 {
		return bad("http.shutdown_timeout", "must not be negative")
	}
	if c.MySQL.MaxOpenConns < 1 {
		return bad("mysql.max_open_conns", "must be at least 1")
	}
	for _, a := range c.Redis.Addr {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return bad("redis.addr", fmt.Sprintf("%q is not host:port", a))
		}
	}
	if c.Redis.DB < 0 {
		return bad("redis.db", "must not be negative")
	}
	if strings.ContainsAny(c.Redis.KeyPrefix, "{} ") {
		return bad("redis.key_prefix", "must not contain braces or spaces")
	}
	if c.Engine.Buckets < 1 || c.Engine.Buckets > 1024 {
		return bad("engine.buckets", "must be between 1 and 1024")
	}
	if c.Engine.PoolSize < 1 {
		return bad("engine.pool_size", "must be at least 1")
	}
	if c.Engine.MigrateStep.D() < time.Minute {
		return bad("engine.migrate_step", "must be at least 1m")
	}
	if c.Engine.MigrateWindow < c.Engine.MigrateStep {
		return bad("engine.migrate_window", "must be at least engine.migrate_step")
	}
	if c.Engine.ResponseExcerptBytes < 0 || c.Engine.ResponseExcerptBytes > 65536 {
		return bad("engine.response_excerpt_bytes", "must be between 0 and 65536")
	}
	if c.Engine.HeartbeatInterval.D() < 100*time.Millisecond {
		return bad("engine.heartbeat_interval", "must be at least 100ms")
	}
	if c.Engine.MissedHeartbeats < 2 {
		return bad("engine.missed_heartbeats", "must be at least 2")
	}
	if c.Engine.RetryPoll.D() < 10*time.Millisecond {
		return bad("engine.retry_poll", "must be at least 10ms")
	}
	if c.Engine.SliceLeaseTTL.D() < time.Second || c.Engine.SliceLeaseTTL.D() > 30*time.Second {
		return bad("engine.slice_lease_ttl", "must be between 1s and 30s")
	}
	if c.Engine.SliceLeaseRenew.D() < 10*time.Millisecond || c.Engine.SliceLeaseRenew >= c.Engine.SliceLeaseTTL/2 {
		return bad("engine.slice_lease_renew", "must be at least 10ms and under half of engine.slice_lease_ttl")
	}
	if c.Engine.ClaimAhead.D() < 0 || c.Engine.ClaimAhead.D() > 2*time.Second {
		return bad("engine.claim_ahead", "must be between 0s and 2s")
	}
	if c.Engine.ClaimAhead.D() >= c.Engine.HeartbeatInterval.D() {
		// An execution claimed ahead waits under its lease; it must be renewed before the
		// takeover could count it stale.
		return bad("engine.claim_ahead", "must be shorter than engine.heartbeat_interval")
	}
	if c.Engine.ResultWriteTimeout.D() < time.Second {
		return bad("engine.result_write_timeout", "must be at least 1s")
	}
	switch {
	case c.Batch.QueueSize < 1:
		return bad("batch.queue_size", "must be at least 1")
	case c.Batch.Workers < 1:
		return bad("batch.workers", "must be at least 1")
	case c.Batch.ScanInterval.D() < time.Second:
		return bad("batch.scan_interval", "must be at least 1s")
	case c.Batch.MaxRetries < 1 || c.Batch.MaxRetries > 10:
		return bad("batch.max_retries", "must be between 1 and 10")
	case c.Batch.MaxTargets < 1:
		return bad("batch.max_targets", "must be at least 1")
	}
	if err := c.Compensation.validate(bad); err != nil {
		return err
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		return bad("log.level", fmt.Sprintf("%q is not debug, info, warn or error", c.Log.Level))
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		return bad("log.format", fmt.Sprintf("%q is not text or json", c.Log.Format))
	}
	return nil
}

func (c Compensation) validate(bad func(key, why string) error) error {
	for _, d := range []struct {
		key string
		v   Duration
		min time.Duration
	}{
		{"compensation.grace", c.Grace, 0},
		{"compensation.quiet", c.Quiet, 0},
		{"compensation.fast_interval", c.FastInterval, time.Second},
		{"compensation.slow_interval", c.SlowInterval, time.Second},
		{"compensation.stuck_after", c.StuckAfter, time.Second},
		{"compensation.catch_up_window", c.CatchUpWindow, time.Minute},
	} {
		if d.v.D() < d.min {
			return bad(d.key, fmt.Sprintf("must be at least %s", d.min))
		}
	}
	if c.SlowInterval < c.FastInterval {
		return bad("compensation.slow_interval", "must be at least compensation.fast_interval")
	}
	if c.Rate < 1 {
		return bad("compensation.rate", "must be at least 1")
	}
	if c.MaxPerPass < 1 {
		return bad("compensation.max_per_pass", "must be at least 1")
	}
	return nil
}

// SQLitePath is the embedded store's file.
func (c Config) SQLitePath() string { return filepath.Join(c.DataDir, "tock.db") }

// Embedded reports which stores run in-process.
func (c Config) Embedded() (sqlite, redis bool) { return c.MySQL.DSN == "", len(c.Redis.Addr) == 0 }

// Duration is a time.Duration written as a Go duration string ("30s") in YAML and env.
type Duration time.Duration

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// UnmarshalYAML accepts a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a duration like 30s or 1h", n.Line, n.Value)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes a Go duration string.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

var durationType = reflect.TypeOf(Duration(0))

// EnvVars lists every TOCK_* variable Load reads, with its YAML key, for docs and errors.
func EnvVars() map[string]string {
	out := map[string]string{}
	walk(reflect.ValueOf(&Config{}).Elem(), "", func(key string, _ reflect.Value) { out[envName(key)] = key })
	return out
}

func envName(key string) string {
	return "TOCK_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

func walk(v reflect.Value, prefix string, fn func(key string, field reflect.Value)) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		key := t.Field(i).Tag.Get("yaml")
		if prefix != "" {
			key = prefix + "." + key
		}
		f := v.Field(i)
		if f.Kind() == reflect.Struct {
			walk(f, key, fn)
			continue
		}
		fn(key, f)
	}
}

func applyEnv(cfg *Config, environ []string) error {
	env := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, "TOCK_") {
			env[k] = v
		}
	}
	var firstErr error
	walk(reflect.ValueOf(cfg).Elem(), "", func(key string, f reflect.Value) {
		name := envName(key)
		raw, ok := env[name]
		if !ok || firstErr != nil {
			return
		}
		if err := setField(f, raw); err != nil {
			firstErr = fmt.Errorf("conf: invalid %s (from %s): %w", key, name, err)
		}
	})
	return firstErr
}

func setField(f reflect.Value, raw string) error {
	switch {
	case f.Type() == durationType:
		d, err := time.ParseDuration(raw)
		if err != nil {
			return fmt.Errorf("%q is not a duration like 30s or 1h", raw)
		}
		f.SetInt(int64(d))
	case f.Kind() == reflect.String:
		f.SetString(raw)
	case f.Kind() == reflect.Int:
		n, err := strconv.Atoi(raw)
		if err != nil {
			return fmt.Errorf("%q is not an integer", raw)
		}
		f.SetInt(int64(n))
	case f.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(raw)
		if err != nil {
			return fmt.Errorf("%q is not true or false", raw)
		}
		f.SetBool(b)
	case f.Kind() == reflect.Slice && f.Type().Elem().Kind() == reflect.String:
		var parts []string
		for _, p := range strings.Split(raw, ",") {
			if p = strings.TrimSpace(p); p != "" {
				parts = append(parts, p)
			}
		}
		f.Set(reflect.ValueOf(parts))
	default:
		return fmt.Errorf("unsupported field kind %s", f.Kind())
	}
	return nil
}
