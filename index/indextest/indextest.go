// Package indextest gives tests a Redis client and a key prefix of their own: an in-process
// miniredis for unit tests, or the real Redis named by TOCK_TEST_REDIS_ADDR.
package indextest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/jonboulle/clockwork"
	"github.com/redis/go-redis/v9"
)

// EnvAddr names the variable holding a real Redis's host:port for integration tests.
const EnvAddr = "TOCK_TEST_REDIS_ADDR"

// Redis is one test's Redis.
type Redis struct {
	Client redis.UniversalClient
	// Prefix is unique to the test; every key the test writes should start with it.
	Prefix string
	// Mini is the in-process server, nil on a real Redis.
	Mini *miniredis.Miniredis
}

// Real reports whether the test runs against a real Redis.
func (r *Redis) Real() bool { return r.Mini == nil }

// SetTime moves a miniredis's time (and so its TTLs) to t; a no-op on a real Redis, whose
// TTLs follow the real clock. Call it before advancing a fake clock to t, while nothing runs.
func (r *Redis) SetTime(t time.Time) {
	if r.Mini != nil {
		r.Mini.SetTime(t)
		_ = r.Mini.DB(0) // apply the move now: expired keys are gone when SetTime returns
	}
}

// Miniredis starts a miniredis for t (closed at cleanup). When clk is not nil its time starts
// at clk.Now() and TTLs run only as SetTime moves it (deterministic virtual time); when nil,
// TTLs follow the real clock.
func Miniredis(t testing.TB, clk clockwork.Clock) *Redis {
	t.Helper()
	m := miniredis.RunT(t)
	m.ClockTTL(true)
	r := &Redis{Mini: m, Prefix: Prefix()}
	if clk != nil {
		r.SetTime(clk.Now())
	}
	r.Client = redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = r.Client.Close() })
	return r
}

// RealRedis connects to TOCK_TEST_REDIS_ADDR with a fresh prefix and deletes the prefix's keys
// at cleanup. Unset: the test is skipped with the reason, or fails when CI is set. Set but
// unreachable: the test fails.
func RealRedis(t testing.TB) *Redis {
	t.Helper()
	addr := os.Getenv(EnvAddr)
	if addr == "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not set, and CI requires the Redis tests to run", EnvAddr)
		}
		t.Skipf("%s is not set: skipping the test against a real Redis (e.g. %s=127.0.0.1:6379)", EnvAddr, EnvAddr)
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		t.Fatalf("redis at %s (%s) is unreachable: %v", addr, EnvAddr, err)
	}
	r := &Redis{Client: rdb, Prefix: Prefix()}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := DeletePrefix(ctx, rdb, r.Prefix); err != nil {
			t.Errorf("clean redis prefix %s: %v", r.Prefix, err)
		}
		_ = rdb.Close()
	})
	return r
}

// Each runs fn as a subtest on a miniredis ("miniredis") and on the real Redis ("redis",
// skipped or failed as RealRedis says).
func Each(t *testing.T, fn func(t *testing.T, r *Redis)) {
	t.Helper()
	t.Run("miniredis", func(t *testing.T) { fn(t, Miniredis(t, nil)) })
	t.Run("redis", func(t *testing.T) { fn(t, RealRedis(t)) })
}

// Prefix returns a fresh key prefix like "tocktest:1a2b3c4d5e6f:".
func Prefix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "tocktest:" + hex.EncodeToString(b[:]) + ":"
}

// DeletePrefix deletes every key starting with prefix (SCAN + DEL in batches).
func DeletePrefix(ctx context.Context, rdb redis.UniversalClient, prefix string) error {
	var cursor uint64
	for {
		keys, next, err := rdb.Scan(ctx, cursor, escapeGlob(prefix)+"*", 500).Result()
		if err != nil {
			return err
		}
		// Delete one by one: keys of different slots cannot share a DEL on a Cluster.
		for _, k := range keys {
			if err := rdb.Del(ctx, k).Err(); err != nil {
				return err
			}
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}

func escapeGlob(s string) string {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', ']', '\\':
			out = append(out, '\\')
		}
		out = append(out, s[i])
	}
	return string(out)
}
