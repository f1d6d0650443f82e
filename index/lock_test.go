package index_test

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/tockd/tock/index"
	"github.com/tockd/tock/index/indextest"
)

func TestLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	indextest.Each(t, func(t *testing.T, r *indextest.Redis) {
		key := r.Prefix + "{lock-test}:lock"
		now := time.Now()

		a, ok, err := index.TryLock(ctx, r.Client, key, time.Minute, now)
		if err != nil || !ok {
			t.Fatalf("first TryLock: ok=%v err=%v", ok, err)
		}
		if _, ok, err := index.TryLock(ctx, r.Client, key, time.Minute, now); err != nil || ok {
			t.Fatalf("second TryLock while held: ok=%v err=%v, want false", ok, err)
		}

		t.Run("ExtendChecksToken", func(t *testing.T) {
			thief := *a
			thief.Token = "not-the-owner"
			if ok, err := thief.Extend(ctx, 10*time.Minute, now); err != nil || ok {
				t.Fatalf("Extend with a wrong token: ok=%v err=%v, want false", ok, err)
			}
			if ttl := r.Client.PTTL(ctx, key).Val(); ttl > time.Minute {
				t.Fatalf("wrong token extended the lock: pttl %s", ttl)
			}
			if ok, err := a.Extend(ctx, 10*time.Minute, now); err != nil || !ok {
				t.Fatalf("owner Extend: ok=%v err=%v", ok, err)
			}
			if ttl := r.Client.PTTL(ctx, key).Val(); ttl <= 9*time.Minute {
				t.Fatalf("owner Extend did not move the TTL: pttl %s", ttl)
			}
			if !a.Expiry().Equal(now.Add(10 * time.Minute)) {
				t.Fatalf("Expiry after Extend = %v", a.Expiry())
			}
		})
		t.Run("ReleaseChecksToken", func(t *testing.T) {
			thief := *a
			thief.Token = "not-the-owner"
			if ok, err := thief.Release(ctx); err != nil || ok {
				t.Fatalf("Release with a wrong token: ok=%v err=%v, want false", ok, err)
			}
			if r.Client.Exists(ctx, key).Val() != 1 {
				t.Fatal("wrong token deleted the lock")
			}
			if ok, err := a.Release(ctx); err != nil || !ok {
				t.Fatalf("owner Release: ok=%v err=%v", ok, err)
			}
			if ok, err := a.Release(ctx); err != nil || ok {
				t.Fatalf("second Release: ok=%v err=%v, want false", ok, err)
			}
		})
		t.Run("ExpiredOwnerCannotTouchNewOwner", func(t *testing.T) {
			old, ok, err := index.TryLock(ctx, r.Client, key, 50*time.Millisecond, now)
			if err != nil || !ok {
				t.Fatalf("TryLock: ok=%v err=%v", ok, err)
			}
			// Expire it as Redis would, then let another owner in.
			r.Client.Del(ctx, key)
			b, ok, err := index.TryLock(ctx, r.Client, key, time.Minute, now)
			if err != nil || !ok {
				t.Fatalf("new owner TryLock: ok=%v err=%v", ok, err)
			}
			if ok, _ := old.Extend(ctx, time.Hour, now); ok {
				t.Fatal("expired owner extended the new owner's lock")
			}
			if ok, _ := old.Release(ctx); ok {
				t.Fatal("expired owner released the new owner's lock")
			}
			if got := r.Client.Get(ctx, key).Val(); got != b.Token {
				t.Fatalf("lock value = %q, want the new owner's token", got)
			}
		})
	})
}

func TestEmbeddedLockExpires(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("RealClock", func(t *testing.T) {
		t.Parallel()
		clk := clockwork.NewRealClock()
		e, err := index.NewEmbedded(clk)
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		if _, ok, err := index.TryLock(ctx, e.Client(), "t:{x}:lock", 300*time.Millisecond, clk.Now()); err != nil || !ok {
			t.Fatalf("TryLock: ok=%v err=%v", ok, err)
		}
		start := time.Now()
		for e.Client().Exists(ctx, "t:{x}:lock").Val() == 1 {
			if time.Since(start) > 5*time.Second {
				t.Fatal("lock with a 300ms TTL still exists after 5s in embedded mode")
			}
			time.Sleep(20 * time.Millisecond)
		}
		if held := time.Since(start); held < 250*time.Millisecond {
			t.Fatalf("lock expired after %s, before its 300ms TTL", held)
		}
		if _, ok, err := index.TryLock(ctx, e.Client(), "t:{x}:lock", time.Second, clk.Now()); err != nil || !ok {
			t.Fatalf("TryLock after expiry: ok=%v err=%v", ok, err)
		}
	})

	t.Run("FakeClock", func(t *testing.T) {
		t.Parallel()
		clk := clockwork.NewFakeClockAt(time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC))
		e, err := index.NewEmbedded(clk)
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		if _, ok, err := index.TryLock(ctx, e.Client(), "t:{x}:lock", 300*time.Millisecond, clk.Now()); err != nil || !ok {
			t.Fatalf("TryLock: ok=%v err=%v", ok, err)
		}
		clk.Advance(299 * time.Millisecond)
		e.Sync()
		if e.Client().Exists(ctx, "t:{x}:lock").Val() != 1 {
			t.Fatal("lock expired 1ms before its TTL")
		}
		if _, ok, _ := index.TryLock(ctx, e.Client(), "t:{x}:lock", time.Second, clk.Now()); ok {
			t.Fatal("TryLock succeeded while the lock is held")
		}
		clk.Advance(time.Millisecond)
		e.Sync()
		if e.Client().Exists(ctx, "t:{x}:lock").Val() != 0 {
			t.Fatal("lock still exists once its TTL ran out in virtual time")
		}
		if _, ok, err := index.TryLock(ctx, e.Client(), "t:{x}:lock", time.Second, clk.Now()); err != nil || !ok {
			t.Fatalf("TryLock after expiry: ok=%v err=%v", ok, err)
		}
	})
}
