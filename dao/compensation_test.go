package dao_test

import (
	"context"
	"testing"

	"github.com/tockd/tock/dao"
	"github.com/tockd/tock/dao/daotest"
)

func TestMisfireStoredAndDefaulted(t *testing.T) {
	t.Parallel()
	daotest.ForEachStore(t, func(t *testing.T, s *dao.Store) {
		ctx := context.Background()
		def := mustCreate(t, s, newTimer("a", "default"))
		if def.Misfire != dao.MisfireFireAll {
			t.Fatalf("created misfire = %q, want fire_all", def.Misfire)
		}
		tm := newTimer("a", "skip")
		tm.Misfire = dao.MisfireSkip
		created := mustCreate(t, s, tm)
		got, err := s.GetTimer(ctx, created.ID)
		if err != nil || got.Misfire != dao.MisfireSkip {
			t.Fatalf("GetTimer misfire = %q, %v; want skip", got.Misfire, err)
		}
		got.Misfire = dao.MisfireFireOnce
		up, err := s.UpdateTimer(ctx, got, got.Version, t0+1)
		if err != nil || up.Misfire != dao.MisfireFireOnce {
			t.Fatalf("UpdateTimer misfire = %q, %v; want fire_once", up.Misfire, err)
		}
		list, err := s.ListEnabledTimers(ctx, 0, 10)
		if err != nil || len(list) != 2 || list[1].Misfire != dao.MisfireFireOnce {
			t.Fatalf("ListEnabledTimers = %+v, %v", list, err)
		}
	})
}

func TestSliceDoneRecords(t *testing.T) {
	t.Parallel()
	daotest.ForEachStore(t, func(t *testing.T, s *dao.Store) {
		ctx := context.Background()
		if _, _, ok, err := s.SliceDoneBounds(ctx); err != nil || ok {
			t.Fatalf("SliceDoneBounds on empty = ok %v, %v", ok, err)
		}
		const m = 60_000
		for _, d := range []dao.SliceDone{
			{SliceStartMS: t0, Bucket: 0, CompletedMS: t0 + m, Instance: "i1"},
			{SliceStartMS: t0, Bucket: 1, CompletedMS: t0 + m, Instance: "i1"},
			{SliceStartMS: t0 + m, Bucket: 0, CompletedMS: t0 + 2*m, Instance: "i2"},
			{SliceStartMS: t0, Bucket: 0, CompletedMS: t0 + 5*m, Instance: "i3"}, // again: first kept
		} {
			if err := s.MarkSliceDone(ctx, d); err != nil {
				t.Fatal(err)
			}
		}
		got, err := s.ListSlicesDone(ctx, t0, t0+m)
		if err != nil {
			t.Fatal(err)
		}
		want := []dao.SliceDone{
			{SliceStartMS: t0, Bucket: 0, CompletedMS: t0 + m, Instance: "i1"},
			{SliceStartMS: t0, Bucket: 1, CompletedMS: t0 + m, Instance: "i1"},
		}
		if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
			t.Fatalf("ListSlicesDone = %+v, want %+v", got, want)
		}
		first, last, ok, err := s.SliceDoneBounds(ctx)
		if err != nil || !ok || first != t0 || last != t0+m {
			t.Fatalf("SliceDoneBounds = %d %d %v %v, want %d %d", first, last, ok, err, t0, t0+m)
		}
		n, err := s.PruneSlicesDone(ctx, t0+m)
		if err != nil || n != 2 {
			t.Fatalf("PruneSlicesDone = %d, %v; want 2", n, err)
		}
		if got, _ := s.ListSlicesDone(ctx, 0, t0+10*m); len(got) != 1 {
			t.Fatalf("after prune: %+v", got)
		}
	})
}

func TestStuckExistingAndMissed(t *testing.T) {
	t.Parallel()
	daotest.ForEachStore(t, func(t *testing.T, s *dao.Store) {
		ctx := context.Background()
		tm := mustCreate(t, s, newTimer("a", "x"))
		other := mustCreate(t, s, newTimer("a", "y"))
		claim := func(timerID, ms, now int64) dao.Execution {
			t.Helper()
			e, ok, err := s.ClaimExecution(ctx, dao.ClaimParams{TimerID: timerID, ScheduledMS: ms, TimerVersion: 1, Owner: "i1", NowMS: now})
			if err != nil || !ok {
				t.Fatalf("claim: %v %v", ok, err)
			}
			return e
		}
		old := claim(tm.ID, t0, t0)
		claim(tm.ID, t0+60_000, t0+60_000) // recent: not stuck
		done := claim(other.ID, t0, t0)
		if err := s.FinishExecution(ctx, dao.FinishParams{ID: done.ID, Owner: "i1", Status: dao.ExecSucceeded, NowMS: t0 + 1}); err != nil {
			t.Fatal(err)
		}
		stuck, err := s.ListStuckExecutions(ctx, t0+30_000, 10)
		if err != nil || len(stuck) != 1 || stuck[0].ID != old.ID {
			t.Fatalf("ListStuckExecutions = %+v, %v; want only %d", stuck, err, old.ID)
		}

		rec, err := s.RecordMissed(ctx, dao.MissedParams{TimerID: tm.ID, ScheduledMS: t0 + 120_000, TimerVersion: 1, Owner: "i1", Reason: "skip", NowMS: t0 + 500_000})
		if err != nil || !rec {
			t.Fatalf("RecordMissed = %v, %v", rec, err)
		}
		// An occurrence with a row is never recorded missed over it.
		rec, err = s.RecordMissed(ctx, dao.MissedParams{TimerID: tm.ID, ScheduledMS: t0, TimerVersion: 1, Owner: "i1", NowMS: t0 + 500_000})
		if err != nil || rec {
			t.Fatalf("RecordMissed over a claimed row = %v, %v; want false", rec, err)
		}
		es, err := s.ListExecutions(ctx, dao.ListExecutionsParams{TimerID: tm.ID, Status: dao.ExecMissed})
		if err != nil || len(es) != 1 || es[0].ScheduledMS != t0+120_000 || es[0].Error != "skip" || es[0].FinishedMS != t0+500_000 {
			t.Fatalf("missed rows = %+v, %v", es, err)
		}
		// And a missed row blocks a later claim: the occurrence never fires.
		if _, ok, err := s.ClaimExecution(ctx, dao.ClaimParams{TimerID: tm.ID, ScheduledMS: t0 + 120_000, TimerVersion: 1, Owner: "i2", NowMS: t0 + 600_000}); err != nil || ok {
			t.Fatalf("claim of a missed occurrence = %v, %v; want not claimed", ok, err)
		}

		got, err := s.ExistingOccurrences(ctx, []int64{tm.ID, other.ID}, t0, t0+120_000)
		if err != nil || len(got) != 3 {
			t.Fatalf("ExistingOccurrences = %+v, %v; want 3", got, err)
		}
		got, err = s.ExistingOccurrences(ctx, []int64{other.ID}, t0+1, t0+1_000_000)
		if err != nil || len(got) != 0 {
			t.Fatalf("ExistingOccurrences out of range = %+v, %v", got, err)
		}
	})
}
