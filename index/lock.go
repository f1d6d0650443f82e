package index

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// extendScript moves a lock's expiry only while the caller still owns it.
//
//	KEYS[1] lock key
//	ARGV[1] owner token
//	ARGV[2] new TTL in milliseconds, counted from the caller's now
//
// Returns 1 when extended, 0 when the lock is gone or owned by someone else.
var extendScript = redis.NewScript(`
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("PEXPIRE", KEYS[1], ARGV[2])
end
return 0
`)

// releaseScript deletes a lock only while the caller still owns it.
//
//	KEYS[1] lock key
//	ARGV[1] owner token
//
// Returns 1 when released, 0 when the lock is gone or owned by someone else.
var releaseScript = redis.NewScript(`
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("DEL", KEYS[1])
end
return 0
`)

// Lock is a held Redis lock: SET key token NX PX ttl with a random owner token. Extend and
// Release check the token inside a script, so an owner whose lock expired and was taken by
// another instance can neither prolong nor delete the new owner's lock.
type Lock struct {
	rdb   redis.UniversalClient
	Key   string
	Token string
	// AcquiredAt and TTL are the caller's clock reading and the TTL given at acquisition (or
	// at the last successful Extend): the lock is safe to rely on until AcquiredAt+TTL.
	AcquiredAt time.Time
	TTL        time.Duration
}

// TryLock takes key for ttl if it is free. ok=false (and no error) when someone holds it.
// now is the caller's clock reading, kept to compute how long the lock can be trusted.
func TryLock(ctx context.Context, rdb redis.UniversalClient, key string, ttl time.Duration, now time.Time) (l *Lock, ok bool, err error) {
	if ttl < time.Millisecond {
		return nil, false, fmt.Errorf("index: lock %s: ttl %s is shorter than 1ms", key, ttl)
	}
	token, err := newToken()
	if err != nil {
		return nil, false, err
	}
	err = rdb.SetArgs(ctx, key, token, redis.SetArgs{Mode: "NX", TTL: ttl}).Err()
	if errors.Is(err, redis.Nil) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("index: lock %s: %w", key, err)
	}
	return &Lock{rdb: rdb, Key: key, Token: token, AcquiredAt: now, TTL: ttl}, true, nil
}

// Expiry is when the lock ends unless extended, by the caller's clock.
func (l *Lock) Expiry() time.Time { return l.AcquiredAt.Add(l.TTL) }

// Extend sets the lock's TTL to ttl from now if the caller still owns it; ok=false when not.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration, now time.Time) (ok bool, err error) {
	n, err := extendScript.Run(ctx, l.rdb, []string{l.Key}, l.Token, ttl.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("index: extend lock %s: %w", l.Key, err)
	}
	if n == 1 {
		l.AcquiredAt, l.TTL = now, ttl
	}
	return n == 1, nil
}

// Release deletes the lock if the caller still owns it; ok=false when it had expired or
// another owner holds it.
func (l *Lock) Release(ctx context.Context) (ok bool, err error) {
	n, err := releaseScript.Run(ctx, l.rdb, []string{l.Key}, l.Token).Int()
	if err != nil {
		return false, fmt.Errorf("index: release lock %s: %w", l.Key, err)
	}
	return n == 1, nil
}

func newToken() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("index: lock token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}
