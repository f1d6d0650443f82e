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
	// MigrateStep is how often the migrator stamps a new window, aligned to the clock. Default: 1h.
	MigrateStep Duration `yaml:"migrate_step"`
	// MigrateWindow is how far ahead occurrences are stamped into Redis; at least MigrateStep.
	// Default: 2h.
	MigrateWindow Duration `yaml:"migrate_window"`
	// ResponseExcerptBytes bounds the callback response or error kept per execution. Default: 1024.
	ResponseExcerptBytes int `yaml:"response_excerpt_bytes"`
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
			PoolSize:             256,
			MigrateStep:          Duration(time.Hour),
			MigrateWindow:        Duration(2 * time.Hour),
			ResponseExcerptBytes: 1024,
		},
		Log: Log{Level: "info", Format: "text"},
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
