package dao_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/tockd/tock/dao"
	"github.com/tockd/tock/dao/daotest"
)

func allVersions(t *testing.T, dialect string) []int64 {
	t.Helper()
	migs, err := dao.Migrations(dialect)
	if err != nil || len(migs) == 0 {
		t.Fatalf("Migrations(%s) = %v, %v", dialect, migs, err)
	}
	var vs []int64
	for _, m := range migs {
		vs = append(vs, m.Version)
	}
	return vs
}

func TestMigrateTwiceIsNoOp(t *testing.T) {
	t.Parallel()
	daotest.ForEachStore(t, func(t *testing.T, s *dao.Store) {
		ctx := context.Background()
		tm := mustCreate(t, s, newTimer("app", "keep"))
		if err := s.Migrate(ctx); err != nil {
			t.Fatalf("second Migrate: %v", err)
		}
		got, err := s.AppliedMigrations(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if want := allVersions(t, s.Dialect()); !slices.Equal(got, want) {
			t.Fatalf("applied = %v, want %v", got, want)
		}
		if _, err := s.GetTimer(ctx, tm.ID); err != nil {
			t.Fatalf("data lost by second Migrate: %v", err)
		}
		if err := s.Ping(ctx); err != nil {
			t.Fatalf("Ping: %v", err)
		}
	})
}

// migrateConcurrently opens three stores on one database and migrates them at once, as
// three instances starting together would.
func migrateConcurrently(t *testing.T, o dao.Options) {
	ctx := context.Background()
	const n = 3
	stores := make([]*dao.Store, n)
	for i := range stores {
		s, err := dao.Open(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		stores[i] = s
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, s := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.Migrate(ctx)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("concurrent Migrate: %v", err)
	}
	got, err := stores[0].AppliedMigrations(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := allVersions(t, stores[0].Dialect()); !slices.Equal(got, want) {
		t.Fatalf("applied = %v, want %v (each once)", got, want)
	}
	mustCreate(t, stores[1], newTimer("app", "after-migrate"))
}

func TestMigrateConcurrentMySQL(t *testing.T) {
	t.Parallel()
	migrateConcurrently(t, dao.Options{MySQLDSN: daotest.MySQLDSN(t), MaxOpenConns: 4})
}

func TestMigrateConcurrentSQLite(t *testing.T) {
	t.Parallel()
	migrateConcurrently(t, dao.Options{SQLitePath: filepath.Join(t.TempDir(), "m.db")})
}

func TestOpen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("SQLiteCreatesDirectory", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "a", "b", "tock.db")
		s, err := dao.Open(ctx, dao.Options{SQLitePath: path})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if s.Dialect() != dao.DialectSQLite {
			t.Fatalf("dialect = %q", s.Dialect())
		}
		if err := s.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(filepath.Dir(path))
		if err != nil || fi.Mode().Perm() != 0o755 {
			t.Fatalf("data dir: %v, %v; want 0755", fi, err)
		}
		var mode string
		if err := s.DB().GetContext(ctx, &mode, "PRAGMA journal_mode"); err != nil || mode != "wal" {
			t.Fatalf("journal_mode = %q, %v; want wal", mode, err)
		}
	})
	t.Run("SQLiteInMemory", func(t *testing.T) {
		t.Parallel()
		s, err := dao.Open(ctx, dao.Options{SQLitePath: ":memory:", MaxOpenConns: 4})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if err := s.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		tm := mustCreate(t, s, newTimer("app", "mem"))
		if _, err := s.UpdateTimer(ctx, tm, tm.Version, t0+1); err != nil {
			t.Fatalf("UpdateTimer in memory: %v", err)
		}
	})
	t.Run("NoBackend", func(t *testing.T) {
		t.Parallel()
		if _, err := dao.Open(ctx, dao.Options{}); err == nil {
			t.Fatal("Open with no options succeeded")
		}
	})
	t.Run("BadMySQLDSN", func(t *testing.T) {
		t.Parallel()
		if _, err := dao.Open(ctx, dao.Options{MySQLDSN: "not a dsn"}); err == nil {
			t.Fatal("Open with a bad DSN succeeded")
		}
	})
}

// TestSQLiteConcurrentWriters: two stores (as two processes would) on one file, eight
// goroutines each writing at once, must all succeed without SQLITE_BUSY.
func TestSQLiteConcurrentWriters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "busy.db")
	var stores []*dao.Store
	for range 2 {
		s, err := dao.Open(ctx, dao.Options{SQLitePath: path})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		if err := s.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		stores = append(stores, s)
	}
	const workers, each = 16, 25
	errs := make(chan error, workers*each)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := stores[w%2]
			for i := range each {
				tm, _, err := s.CreateTimer(ctx, newTimer("busy", fmt.Sprintf("w%d-%d", w, i)), t0)
				if err != nil {
					errs <- err
					continue
				}
				// A read-then-write transaction, the case that fails without _txlock=immediate.
				if _, err := s.UpdateTimer(ctx, tm, tm.Version, t0+1); err != nil {
					errs <- err
					continue
				}
				if _, _, err := s.ClaimExecution(ctx, dao.ClaimParams{TimerID: tm.ID, ScheduledMS: t0, TimerVersion: 2, Owner: "n", NowMS: t0}); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent write: %v", err)
	}
	got, err := stores[0].ListTimers(ctx, dao.ListTimersParams{App: "busy", Limit: 1000})
	if err != nil || len(got) != workers*each {
		t.Fatalf("listed %d timers, %v; want %d", len(got), err, workers*each)
	}
}
