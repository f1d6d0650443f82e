package dao_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"

	"github.com/tockd/tock/dao"
	"github.com/tockd/tock/dao/daotest"
	"github.com/tockd/tock/schedule"
)

// Benchmarks of the store calls the executor makes per occurrence: the claim
// (ClaimExecution) and the result write (RecordAttempt). SQLite always; MySQL when
// TOCK_TEST_MYSQL_DSN is set (skipped otherwise), each in a database of its own dropped at
// the end.
//
//	TOCK_TEST_MYSQL_DSN='root@tcp(127.0.0.1:3306)/test' go test -run XXX -bench . -benchmem ./dao/

// benchStores runs fn as sub-benchmarks "sqlite" and "mysql" over one store per backend,
// created once for all of fn's runs.
func benchStores(b *testing.B, fn func(b *testing.B, s *dao.Store)) {
	sqlite := daotest.SQLite(b)
	var mysql *dao.Store
	if os.Getenv(daotest.EnvMySQLDSN) != "" {
		mysql = daotest.MySQL(b)
	}
	b.Run(dao.DialectSQLite, func(b *testing.B) { fn(b, sqlite) })
	b.Run(dao.DialectMySQL, func(b *testing.B) {
		if mysql == nil {
			b.Skipf("%s not set", daotest.EnvMySQLDSN)
		}
		fn(b, mysql)
	})
}

// benchSeq makes timer names unique across the runs of a benchmark.
var benchSeq atomic.Int64

// benchTimers creates n enabled timers (every second) for one run.
func benchTimers(b *testing.B, s *dao.Store, n int) []dao.Timer {
	b.Helper()
	ts := make([]dao.Timer, n)
	for i := range ts {
		t, _, err := s.CreateTimer(context.Background(), dao.Timer{
			App: "bench", Name: fmt.Sprint("bench-", benchSeq.Add(1)), Status: dao.StatusEnabled,
			Schedule: dao.JSONSpec(schedule.Spec{Every: "1s"}), AnchorMS: t0,
			Callback: dao.Callback{URL: "http://127.0.0.1:9/hook", Method: "POST", TimeoutMS: 5000},
			Retry:    dao.RetryPolicy{MaxAttempts: 3, BackoffMS: 1000, MaxBackoffMS: 60000},
		}, t0)
		if err != nil {
			b.Fatal(err)
		}
		ts[i] = t
	}
	return ts
}

// benchClaim claims occurrence i (every second from t0) of t.
func benchClaim(ctx context.Context, s *dao.Store, t dao.Timer, i int64) (dao.Execution, error) {
	e, claimed, err := s.ClaimExecution(ctx, dao.ClaimParams{
		TimerID: t.ID, ScheduledMS: t0 + i*1000, TimerVersion: t.Version, Owner: "bench-instance", NowMS: t0 + i*1000,
	})
	if err == nil && !claimed {
		err = fmt.Errorf("occurrence %d of timer %d not claimed (existing %d)", i, t.ID, e.ID)
	}
	return e, err
}

// BenchmarkClaimExecution: one claim of a new occurrence per op, one at a time (the
// latency of a claim).
func BenchmarkClaimExecution(b *testing.B) {
	benchStores(b, func(b *testing.B, s *dao.Store) {
		ctx := context.Background()
		t := benchTimers(b, s, 1)[0]
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			if _, err := benchClaim(ctx, s, t, int64(i)); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "claims/s")
	})
}

// BenchmarkClaimExecutionParallel: claims of new occurrences of 64 timers from 16 goroutines
// (2 per CPU x 8), as the executor's pool makes them.
func BenchmarkClaimExecutionParallel(b *testing.B) {
	benchStores(b, func(b *testing.B, s *dao.Store) {
		ctx := context.Background()
		ts := benchTimers(b, s, 64)
		var next atomic.Int64
		b.SetParallelism(8)
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				i := next.Add(1)
				if _, err := benchClaim(ctx, s, ts[i%int64(len(ts))], i); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.StopTimer()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "claims/s")
	})
}

// BenchmarkRecordAttempt: the result write after a callback (RecordAttempt: the execution's
// new state and its attempt row in one transaction), one per op on executions claimed
// beforehand.
func BenchmarkRecordAttempt(b *testing.B) {
	benchStores(b, func(b *testing.B, s *dao.Store) {
		ctx := context.Background()
		t := benchTimers(b, s, 1)[0]
		execs := make([]dao.Execution, b.N)
		for i := range execs {
			e, err := benchClaim(ctx, s, t, int64(i))
			if err != nil {
				b.Fatal(err)
			}
			execs[i] = e
		}
		b.ReportAllocs()
		b.ResetTimer()
		for _, e := range execs {
			if err := s.RecordAttempt(ctx, recordParams(e)); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "results/s")
	})
}

// BenchmarkRecordAttemptParallel: result writes from 16 goroutines.
func BenchmarkRecordAttemptParallel(b *testing.B) {
	benchStores(b, func(b *testing.B, s *dao.Store) {
		ctx := context.Background()
		ts := benchTimers(b, s, 64)
		execs := make([]dao.Execution, b.N)
		for i := range execs {
			e, err := benchClaim(ctx, s, ts[i%len(ts)], int64(i))
			if err != nil {
				b.Fatal(err)
			}
			execs[i] = e
		}
		var next atomic.Int64
		b.SetParallelism(8)
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := s.RecordAttempt(ctx, recordParams(execs[next.Add(1)-1])); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.StopTimer()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "results/s")
	})
}

// recordParams is a succeeded first attempt of e, as the executor writes it.
func recordParams(e dao.Execution) dao.RecordAttemptParams {
	return dao.RecordAttemptParams{
		ID: e.ID, Owner: e.Owner, Attempt: e.Attempt, Status: dao.ExecSucceeded, HTTPStatus: 200,
		Response: `{"ok":true}`, StartedMS: e.StartedMS, DurationMS: 12, NowMS: e.StartedMS + 12,
	}
}
