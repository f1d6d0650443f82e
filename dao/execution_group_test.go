package dao_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/tockd/tock/dao"
	"github.com/tockd/tock/dao/daotest"
)

// The group writes keep each row's single-row semantics: a fresh occurrence is claimed, an
// existing one is returned unclaimed, a timer not enabled at the version gets nothing.
func TestClaimExecutionsGroup(t *testing.T) {
	t.Parallel()
	daotest.ForEachStore(t, func(t *testing.T, s *dao.Store) {
		ctx := context.Background()
		a := mustCreate(t, s, newTimer("grp", "a"))
		b := mustCreate(t, s, newTimer("grp", "b"))
		off := newTimer("grp", "off")
		off.Status = dao.StatusDisabled
		off = mustCreate(t, s, off)
		// b's first occurrence was claimed earlier by another instance.
		prior, ok, err := s.ClaimExecution(ctx, dao.ClaimParams{TimerID: b.ID, ScheduledMS: t0 + 60_000, TimerVersion: b.Version, Owner: "other", NowMS: t0 + 1})
		if err != nil || !ok {
			t.Fatal(ok, err)
		}
		now := t0 + 60_003
		ps := []dao.ClaimParams{
			{TimerID: a.ID, ScheduledMS: t0 + 60_000, TimerVersion: a.Version},
			{TimerID: a.ID, ScheduledMS: t0 + 120_000, TimerVersion: a.Version},
			{TimerID: b.ID, ScheduledMS: t0 + 60_000, TimerVersion: b.Version},
			{TimerID: b.ID, ScheduledMS: t0 + 120_000, TimerVersion: b.Version + 1}, // stale version
			{TimerID: off.ID, ScheduledMS: t0 + 60_000, TimerVersion: off.Version},
		}
		for i := range ps {
			ps[i].Owner, ps[i].NowMS = "me", now
		}
		got, err := s.ClaimExecutions(ctx, ps)
		if err != nil {
			t.Fatal(err)
		}
		for i, want := range []bool{true, true, false, false, false} {
			if got[i].Claimed != want {
				t.Fatalf("claim %d: claimed %v, want %v (%+v)", i, got[i].Claimed, want, got[i])
			}
		}
		// Claimed ahead of its time, an execution starts at its time.
		for _, i := range []int{0, 1} {
			e := got[i].Existing
			if e.ID == 0 || e.Owner != "me" || e.Status != dao.ExecRunning || e.Attempt != 1 || e.StartedMS != max(now, ps[i].ScheduledMS) || e.TimerVersion != a.Version {
				t.Fatalf("claimed row %d = %+v", i, e)
			}
		}
		if got[2].Existing != prior {
			t.Fatalf("existing row = %+v, want %+v", got[2].Existing, prior)
		}
		if got[3].Existing.ID != 0 || got[4].Existing.ID != 0 {
			t.Fatalf("stale version or disabled timer got a row: %+v", got[3:])
		}
		// Claiming the same group again, later, claims nothing: every row exists. (At the same
		// instant the rows would count as claimed: see ClaimExecutions.)
		later := append([]dao.ClaimParams(nil), ps[:2]...)
		later[0].NowMS, later[1].NowMS = now+1, now+1
		again, err := s.ClaimExecutions(ctx, later)
		if err != nil || again[0].Claimed || again[1].Claimed || again[0].Existing.ID != got[0].Existing.ID {
			t.Fatalf("second claim = %+v, %v", again, err)
		}
		if _, err := s.ClaimExecutions(ctx, []dao.ClaimParams{ps[0], {TimerID: a.ID, ScheduledMS: 1, Owner: "else", NowMS: now}}); err == nil {
			t.Fatal("a group with two owners must be refused")
		}
	})
}

// RecordAttempts: held executions are recorded (final and pending), a lost one is
// ErrNotFound, an attempt recorded already is a success, a bad status fails alone.
func TestRecordAttemptsGroup(t *testing.T) {
	t.Parallel()
	daotest.ForEachStore(t, func(t *testing.T, s *dao.Store) {
		ctx := context.Background()
		tm := mustCreate(t, s, newTimer("grp", "rec"))
		claim := func(k int, owner string) dao.Execution {
			e, ok, err := s.ClaimExecution(ctx, dao.ClaimParams{TimerID: tm.ID, ScheduledMS: t0 + int64(k)*60_000, TimerVersion: tm.Version, Owner: owner, NowMS: t0})
			if err != nil || !ok {
				t.Fatal(ok, err)
			}
			return e
		}
		ok1, ok2, lost, done := claim(1, "me"), claim(2, "me"), claim(3, "other"), claim(4, "me")
		rec := func(e dao.Execution, status string) dao.RecordAttemptParams {
			p := dao.RecordAttemptParams{ID: e.ID, Owner: "me", Attempt: 1, Status: status, HTTPStatus: 200, Response: fmt.Sprint("r", e.ID),
				StartedMS: t0 + 5, DurationMS: 3, NowMS: t0 + 8}
			if status == dao.ExecPending {
				p.HTTPStatus, p.Error, p.NextRetryMS = 503, "503", t0+1000
			}
			return p
		}
		if err := s.RecordAttempt(ctx, rec(done, dao.ExecSucceeded)); err != nil {
			t.Fatal(err)
		}
		ps := []dao.RecordAttemptParams{rec(ok1, dao.ExecSucceeded), rec(ok2, dao.ExecPending), rec(lost, dao.ExecSucceeded),
			rec(done, dao.ExecSucceeded), rec(ok1, "bogus")}
		errs, err := s.RecordAttempts(ctx, ps)
		if err != nil {
			t.Fatal(err)
		}
		if errs[0] != nil || errs[1] != nil || !errors.Is(errs[2], dao.ErrNotFound) || errs[3] != nil || errs[4] == nil {
			t.Fatalf("errors %v", errs)
		}
		e1, _ := s.GetExecution(ctx, ok1.ID)
		if e1.Status != dao.ExecSucceeded || e1.HTTPStatus != 200 || e1.Response != fmt.Sprint("r", ok1.ID) || e1.FinishedMS != t0+8 || e1.Owner != "me" {
			t.Fatalf("succeeded row %+v", e1)
		}
		e2, _ := s.GetExecution(ctx, ok2.ID)
		times, _ := s.GetExecutionTimes(ctx, ok2.ID)
		if e2.Status != dao.ExecPending || e2.Owner != "" || e2.FinishedMS != 0 || times.NextRetryMS != t0+1000 {
			t.Fatalf("pending row %+v %+v", e2, times)
		}
		if e3, _ := s.GetExecution(ctx, lost.ID); e3.Status != dao.ExecRunning || e3.Owner != "other" {
			t.Fatalf("lost row written: %+v", e3)
		}
		for _, e := range []dao.Execution{ok1, ok2} {
			as, err := s.ListAttempts(ctx, e.ID)
			if err != nil || len(as) != 1 || as[0].Attempt != 1 || as[0].Owner != "me" {
				t.Fatalf("attempts of %d: %+v, %v", e.ID, as, err)
			}
		}
		// The same group again (a write whose answer was lost): all that was held is done.
		errs, err = s.RecordAttempts(ctx, ps[:2])
		if err != nil || errs[0] != nil || errs[1] != nil {
			t.Fatalf("again: %v, %v", errs, err)
		}
	})
}

func TestCompleteOneShotsGroup(t *testing.T) {
	t.Parallel()
	daotest.ForEachStore(t, func(t *testing.T, s *dao.Store) {
		ctx := context.Background()
		a := mustCreate(t, s, newTimer("grp", "one-a"))
		b := mustCreate(t, s, newTimer("grp", "one-b"))
		if err := s.CompleteOneShots(ctx, []dao.OneShot{{ID: a.ID, Version: a.Version}, {ID: b.ID, Version: b.Version + 5}}, t0+9); err != nil {
			t.Fatal(err)
		}
		ga, _ := s.GetTimer(ctx, a.ID)
		gb, _ := s.GetTimer(ctx, b.ID)
		if ga.Status != dao.StatusCompleted || ga.Version != a.Version+1 || ga.UpdatedMS != t0+9 {
			t.Fatalf("completed %+v", ga)
		}
		if gb.Status != dao.StatusEnabled || gb.Version != b.Version {
			t.Fatalf("other version completed: %+v", gb)
		}
	})
}
