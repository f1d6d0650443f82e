package compensator_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/tockd/tock/compensator"
	"github.com/tockd/tock/dao"
	"github.com/tockd/tock/dao/daotest"
	"github.com/tockd/tock/index"
	"github.com/tockd/tock/schedule"
)

// BenchmarkPass measures a pass over 10,000 every-second timers with 8 buckets: all slices
// of the window recorded done (the steady state), and one undone slice (1,250 timers x 60
// occurrences recomputed and compared; every occurrence has a row, so nothing fires).
// go test -run '^$' -bench Pass -benchtime 5x ./compensator/
func BenchmarkPass(b *testing.B) {
	const timers = 10000
	s := daotest.SQLite(b)
	ctx := context.Background()
	now := t0.Add(2 * time.Hour)
	keys := index.NewKeys("t:", 8)
	var ids []int64
	for i := range timers {
		tm, _, err := s.CreateTimer(ctx, dao.Timer{App: "a", Name: fmt.Sprint(i), Status: dao.StatusEnabled,
			Schedule: dao.JSONSpec(schedule.Spec{Every: "1s"}), AnchorMS: t0.UnixMilli(),
			Callback: dao.Callback{URL: "http://127.0.0.1:9/", Method: "POST", TimeoutMS: 1000}}, t0.UnixMilli())
		if err != nil {
			b.Fatal(err)
		}
		ids = append(ids, tm.ID)
	}
	undone := index.Slice{Start: now.Add(-10 * time.Minute), Bucket: 3}
	// Rows for the undone slice's occurrences, so the comparison finds them all.
	tx := s.DB().MustBegin()
	for _, id := range ids {
		if keys.Bucket(id) != undone.Bucket {
			continue
		}
		for ms := undone.Start.UnixMilli(); ms < undone.End().UnixMilli(); ms += 1000 {
			tx.MustExec(`INSERT INTO timer_task (timer_id, scheduled_ms, status, attempt, owner, timer_version, created_ms, updated_ms)
			VALUES (?, ?, 'succeeded', 1, 'x', 1, ?, ?)`, id, ms, ms, ms)
		}
	}
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
	bb := &bundle{store: s, keys: keys}
	c := newBenchCompensator(b, s, keys, now)
	bb.comp = c
	bb.markDone(b, now.Add(-70*time.Minute), now, undone)

	b.Run("AllSlicesDone", func(b *testing.B) {
		for range b.N {
			// Recorded done by the scanning pass below only after it runs; here the undone
			// slice is excluded by looking at a window that ends before it.
			rep, err := c.RunOnce(ctx, undone.Start.Add(-3*time.Minute))
			if err != nil || rep.SlicesScanned != 0 {
				b.Fatal(rep, err)
			}
		}
	})
	b.Run("OneUndoneSlice", func(b *testing.B) {
		for range b.N {
			_, _ = s.DB().Exec(`DELETE FROM slice_done WHERE slice_start_ms = ? AND bucket = ?`, undone.Start.UnixMilli(), undone.Bucket)
			rep, err := c.RunOnce(ctx, now)
			if err != nil || rep.SlicesScanned != 1 || rep.Missing != 0 {
				b.Fatal(rep, err)
			}
		}
	})
}

func newBenchCompensator(b *testing.B, s *dao.Store, keys index.Keys, now time.Time) *compensator.Compensator {
	c, err := compensator.New(compensator.Config{InstanceID: "i1", Clock: clockwork.NewFakeClockAt(now), Logger: quiet},
		compensator.Deps{Store: s, Executor: &fakeExec{}, Keys: keys})
	if err != nil {
		b.Fatal(err)
	}
	return c
}
