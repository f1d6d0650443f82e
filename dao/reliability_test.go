package dao_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/tockd/tock/dao"
	"github.com/tockd/tock/dao/daotest"
)

func claimOne(t *testing.T, s *dao.Store, tm dao.Timer, scheduledMS int64, owner string, nowMS int64) dao.Execution {
	t.Helper()
	e, claimed, err := s.ClaimExecution(context.Background(), dao.ClaimParams{
		TimerID: tm.ID, ScheduledMS: scheduledMS, TimerVersion: tm.Version, Owner: owner, NowMS: nowMS,
	})
	if err != nil || !claimed {
		t.Fatalf("claim = %+v, %v, %v", e, claimed, err)
	}
	return e
}

func TestRenewExecutionIsACompareAndSetOnTheOwner(t *testing.T) {
	t.Parallel()
	daotest.ForEachStore(t, func(t *testing.T, s *dao.Store) {
		ctx := context.Background()
		tm := mustCreate(t, s, newTimer("app", "renew"))
		e := claimOne(t, s, tm, t0+60_000, "node-1", t0+60_000)

		held, err := s.RenewExecution(ctx, e.ID, "node-1", t0+62_000)
		if err != nil || !held {
			t.Fatalf("owner renew = %v, %v; want held", held, err)
		}
		held, err = s.RenewExecution(ctx, e.ID, "node-1", t0+62_000) // same millisecond
		if err != nil || !held {
			t.Fatalf("owner renew in the same ms = %v, %v; want held", held, err)
		}
		held, err = s.RenewExecution(ctx, e.ID, "node-2", t0+62_000)
		if err != nil || held {
			t.Fatalf("other instance renew = %v, %v; want not held", held, err)
		}
		times, err := s.GetExecutionTimes(ctx, e.ID)
		if err != nil || times.HeartbeatMS != t0+62_000 {
			t.Fatalf("times = %+v, %v; want heartbeat at +62s", times, err)
		}
	})
}

func TestTakeoverResetsStaleOnceAndOwnerLosesIt(t *testing.T) {
	t.Parallel()
	daotest.ForEachStore(t, func(t *testing.T, s *dao.Store) {
		ctx := context.Background()
		tm := mustCreate(t, s, newTimer("app", "stale"))
		dead := claimOne(t, s, tm, t0+60_000, "dead", t0+60_000)
		alive := claimOne(t, s, tm, t0+120_000, "alive", t0+60_000)
		if held, err := s.RenewExecution(ctx, alive.ID, "alive", t0+66_000); err != nil || !held {
			t.Fatalf("renew alive = %v, %v", held, err)
		}

		// Two instances scan at once with a 6s staleness (3 beats of 2s) at +67s: "dead"
		// (last renewed at +60s) is reset exactly once, "alive" (+66s) is left alone.
		var wg sync.WaitGroup
		results := make([][]dao.Execution, 2)
		for i := range results {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := s.ResetStaleExecutions(ctx, dao.ResetStaleParams{StaleBeforeMS: t0 + 61_000, NowMS: t0 + 67_000})
				if err != nil {
					t.Error(err)
				}
				results[i] = r
			}()
		}
		wg.Wait()
		total := len(results[0]) + len(results[1])
		if total != 1 {
			t.Fatalf("reset %d + %d executions; want exactly 1 in all", len(results[0]), len(results[1]))
		}
		got, _ := s.GetExecution(ctx, dead.ID)
		if got.Status != dao.ExecPending || got.Owner != "" {
			t.Fatalf("stale execution after reset = %+v; want pending without owner", got)
		}
		if got, _ := s.GetExecution(ctx, alive.ID); got.Status != dao.ExecRunning || got.Owner != "alive" {
			t.Fatalf("renewed execution = %+v; want still running under alive", got)
		}
		// The dead owner comes back: it can neither renew nor record.
		if held, err := s.RenewExecution(ctx, dead.ID, "dead", t0+68_000); err != nil || held {
			t.Fatalf("old owner renew = %v, %v; want lost", held, err)
		}
		err := s.RecordAttempt(ctx, dao.RecordAttemptParams{ID: dead.ID, Owner: "dead", Attempt: 1, Status: dao.ExecSucceeded,
			HTTPStatus: 200, NowMS: t0 + 68_000})
		if !errors.Is(err, dao.ErrNotFound) {
			t.Fatalf("old owner record = %v; want ErrNotFound", err)
		}

		// The reset execution is due now: one of two pollers claims it, as attempt 2.
		var claims [2][]dao.Execution
		for i := range claims {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := s.ClaimDueRetries(ctx, dao.ClaimRetriesParams{Owner: []string{"a", "b"}[i], NowMS: t0 + 68_000})
				if err != nil {
					t.Error(err)
				}
				claims[i] = r
			}()
		}
		wg.Wait()
		all := append(claims[0], claims[1]...)
		if len(all) != 1 || all[0].ID != dead.ID || all[0].Attempt != 2 || all[0].Status != dao.ExecRunning {
			t.Fatalf("claims = %+v; want the reset execution once, running, attempt 2", all)
		}
	})
}

func TestRecordAttemptRetryThenSucceed(t *testing.T) {
	t.Parallel()
	daotest.ForEachStore(t, func(t *testing.T, s *dao.Store) {
		ctx := context.Background()
		tm := mustCreate(t, s, newTimer("app", "retry"))
		e := claimOne(t, s, tm, t0+60_000, "n1", t0+60_000)

		fail := dao.RecordAttemptParams{ID: e.ID, Owner: "n1", Attempt: 1, Status: dao.ExecPending, NextRetryMS: t0 + 61_500,
			HTTPStatus: 503, Error: "callback answered 503", StartedMS: t0 + 60_000, DurationMS: 12, NowMS: t0 + 60_012}
		if err := s.RecordAttempt(ctx, fail); err != nil {
			t.Fatal(err)
		}
		if err := s.RecordAttempt(ctx, fail); err != nil {
			t.Fatalf("recording the same attempt again = %v; want nil", err)
		}
		got, _ := s.GetExecution(ctx, e.ID)
		times, _ := s.GetExecutionTimes(ctx, e.ID)
		if got.Status != dao.ExecPending || got.Owner != "" || got.HTTPStatus != 503 || times.NextRetryMS != t0+61_500 {
			t.Fatalf("after failed attempt: %+v %+v", got, times)
		}
		// Not due yet.
		if c, err := s.ClaimDueRetries(ctx, dao.ClaimRetriesParams{Owner: "n2", NowMS: t0 + 61_499}); err != nil || len(c) != 0 {
			t.Fatalf("early claim = %+v, %v; want none", c, err)
		}
		c, err := s.ClaimDueRetries(ctx, dao.ClaimRetriesParams{Owner: "n2", NowMS: t0 + 61_500})
		if err != nil || len(c) != 1 || c[0].Attempt != 2 || c[0].Owner != "n2" {
			t.Fatalf("due claim = %+v, %v", c, err)
		}
		ok := dao.RecordAttemptParams{ID: e.ID, Owner: "n2", Attempt: 2, Status: dao.ExecSucceeded, HTTPStatus: 200,
			StartedMS: t0 + 61_500, DurationMS: 5, NowMS: t0 + 61_505}
		if err := s.RecordAttempt(ctx, ok); err != nil {
			t.Fatal(err)
		}
		got, _ = s.GetExecution(ctx, e.ID)
		if got.Status != dao.ExecSucceeded || got.FinishedMS != t0+61_505 || got.Attempt != 2 {
			t.Fatalf("after success: %+v", got)
		}
		as, err := s.ListAttempts(ctx, e.ID)
		if err != nil || len(as) != 2 {
			t.Fatalf("attempts = %+v, %v", as, err)
		}
		if as[0].Attempt != 1 || as[0].HTTPStatus != 503 || as[0].Owner != "n1" || as[0].StartedMS != t0+60_000 ||
			as[1].Attempt != 2 || as[1].HTTPStatus != 200 || as[1].Error != "" || as[1].FinishedMS != t0+61_505 {
			t.Fatalf("attempts = %+v", as)
		}
	})
}

func TestHandBackExecution(t *testing.T) {
	t.Parallel()
	daotest.ForEachStore(t, func(t *testing.T, s *dao.Store) {
		ctx := context.Background()
		tm := mustCreate(t, s, newTimer("app", "handback"))
		e := claimOne(t, s, tm, t0+60_000, "n1", t0+60_000)
		if err := s.HandBackExecution(ctx, e.ID, "n2", t0+61_000); !errors.Is(err, dao.ErrNotFound) {
			t.Fatalf("hand back by non-owner = %v; want ErrNotFound", err)
		}
		if err := s.HandBackExecution(ctx, e.ID, "n1", t0+61_000); err != nil {
			t.Fatal(err)
		}
		c, err := s.ClaimDueRetries(ctx, dao.ClaimRetriesParams{Owner: "n2", NowMS: t0 + 61_000})
		if err != nil || len(c) != 1 || c[0].ID != e.ID {
			t.Fatalf("claim after hand back = %+v, %v", c, err)
		}
	})
}
