package dao_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"

	"github.com/tockd/tock/dao"
	"github.com/tockd/tock/dao/daotest"
	"github.com/tockd/tock/schedule"
)

func TestCreateAndGetTimer(t *testing.T) {
	t.Parallel()
	daotest.ForEachStore(t, func(t *testing.T, s *dao.Store) {
		ctx := context.Background()
		in := newTimer("billing", "nightly-ü-🙂")
		in.RequestID, in.RequestHash = "req-1", "abc123"
		got := mustCreate(t, s, in)
		if got.ID <= 0 || got.Version != 1 || got.CreatedMS != t0 || got.UpdatedMS != t0 {
			t.Fatalf("created = %+v, want id > 0, version 1, times %d", got, t0)
		}
		read, err := s.GetTimer(ctx, got.ID)
		if err != nil {
			t.Fatalf("GetTimer: %v", err)
		}
		if !reflect.DeepEqual(read, got) {
			t.Fatalf("GetTimer = %+v\nwant       %+v", read, got)
		}

		// No request id and no status: stored as NULL (several allowed) and enabled.
		a := newTimer("billing", "a")
		a.Status = ""
		ga := mustCreate(t, s, a)
		gb := mustCreate(t, s, newTimer("billing", "b"))
		if ga.Status != dao.StatusEnabled || ga.RequestID != "" || gb.ID <= ga.ID {
			t.Fatalf("a = %+v, b = %+v", ga, gb)
		}
		if _, err := s.GetTimer(ctx, gb.ID+1000); !errors.Is(err, dao.ErrNotFound) {
			t.Fatalf("GetTimer(missing) err = %v, want ErrNotFound", err)
		}
	})
}

func TestCreateTimerRequestID(t *testing.T) {
	t.Parallel()
	daotest.ForEachStore(t, func(t *testing.T, s *dao.Store) {
		ctx := context.Background()
		in := newTimer("app", "t1")
		in.RequestID, in.RequestHash = "r-1", "h1"
		first := mustCreate(t, s, in)

		t.Run("SameKeyReturnsOriginal", func(t *testing.T) {
			again := in
			again.Name, again.RequestHash = "other-name", "h2"
			got, existed, err := s.CreateTimer(ctx, again, t0+5)
			if err != nil || !existed || got.ID != first.ID || got.Name != "t1" || got.RequestHash != "h1" {
				t.Fatalf("CreateTimer(same key) = %+v, %v, %v; want original, existed", got, existed, err)
			}
		})
		t.Run("SameKeyOtherAppCreates", func(t *testing.T) {
			other := in
			other.App = "app2"
			got, existed, err := s.CreateTimer(ctx, other, t0)
			if err != nil || existed || got.ID == first.ID {
				t.Fatalf("CreateTimer(other app) = %+v, %v, %v", got, existed, err)
			}
		})
		t.Run("OtherKeySameNameIsNameTaken", func(t *testing.T) {
			dup := in
			dup.RequestID = "r-2"
			if _, _, err := s.CreateTimer(ctx, dup, t0); !errors.Is(err, dao.ErrNameTaken) {
				t.Fatalf("err = %v, want ErrNameTaken", err)
			}
		})
		t.Run("DeletedTimerStillAnswersItsKey", func(t *testing.T) {
			d := newTimer("app", "to-delete")
			d.RequestID = "r-del"
			created := mustCreate(t, s, d)
			if err := s.DeleteTimer(ctx, created.ID, t0+1); err != nil {
				t.Fatal(err)
			}
			got, existed, err := s.CreateTimer(ctx, d, t0+2)
			if err != nil || !existed || got.ID != created.ID || got.Status != dao.StatusDeleted {
				t.Fatalf("CreateTimer(deleted key) = %+v, %v, %v", got, existed, err)
			}
		})
		t.Run("ConcurrentSameKeyCreatesOnce", func(t *testing.T) {
			c := newTimer("race", "one")
			c.RequestID = "r-race"
			const n = 10
			var (
				wg      sync.WaitGroup
				mu      sync.Mutex
				created int
				seen    = map[int64]bool{}
				errs    []error
			)
			for range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					got, existed, err := s.CreateTimer(ctx, c, t0)
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						errs = append(errs, err)
						return
					}
					if !existed {
						created++
					}
					seen[got.ID] = true
				}()
			}
			wg.Wait()
			if len(errs) > 0 || created != 1 || len(seen) != 1 {
				t.Fatalf("created %d, distinct ids %d, errors %v; want 1, 1, none", created, len(seen), errs)
			}
		})
	})
}

func TestTimerNameUniqueness(t *testing.T) {
	t.Parallel()
	daotest.ForEachStore(t, func(t *testing.T, s *dao.Store) {
		ctx := context.Background()
		first := mustCreate(t, s, newTimer("app", "name"))
		if _, _, err := s.CreateTimer(ctx, newTimer("app", "name"), t0); !errors.Is(err, dao.ErrNameTaken) {
			t.Fatalf("duplicate name: err = %v, want ErrNameTaken", err)
		}
		mustCreate(t, s, newTimer("other-app", "name"))
		// Byte-exact comparison on both backends.
		mustCreate(t, s, newTimer("app", "NAME"))

		if err := s.DeleteTimer(ctx, first.ID, t0+1); err != nil {
			t.Fatal(err)
		}
		second := mustCreate(t, s, newTimer("app", "name"))
		if err := s.DeleteTimer(ctx, second.ID, t0+2); err != nil {
			t.Fatal(err)
		}
		// Two deleted timers may share the name, and it is free a third time.
		mustCreate(t, s, newTimer("app", "name"))
	})
}

func TestGetTimers(t *testing.T) {
	t.Parallel()
	daotest.ForEachStore(t, func(t *testing.T, s *dao.Store) {
		ctx := context.Background()
		a := mustCreate(t, s, newTimer("app", "a"))
		b := mustCreate(t, s, newTimer("app", "b"))
		c := mustCreate(t, s, newTimer("app", "c"))
		if err := s.DeleteTimer(ctx, c.ID, t0); err != nil {
			t.Fatal(err)
		}
		got, err := s.GetTimers(ctx, []int64{a.ID, b.ID, c.ID, c.ID + 100})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || got[a.ID].Name != "a" || got[b.ID].Name != "b" {
			t.Fatalf("GetTimers = %+v, want a and b", got)
		}
		empty, err := s.GetTimers(ctx, nil)
		if err != nil || len(empty) != 0 {
			t.Fatalf("GetTimers(nil) = %v, %v", empty, err)
		}
		// More ids than one IN chunk.
		many := make([]int64, 1200)
		for i := range many {
			many[i] = int64(i + 1)
		}
		got, err = s.GetTimers(ctx, many)
		if err != nil || len(got) != 2 {
			t.Fatalf("GetTimers(1200 ids) = %d timers, %v; want 2", len(got), err)
		}
	})
}

func TestListTimers(t *testing.T) {
	t.Parallel()
	daotest.ForEachStore(t, func(t *testing.T, s *dao.Store) {
		ctx := context.Background()
		var all, appA, disabled []int64
		for i := range 7 {
			app := "a"
			if i%2 == 1 {
				app = "b"
			}
			tm := newTimer(app, fmt.Sprintf("t%d", i))
			if i == 2 || i == 5 {
				tm.Status = dao.StatusDisabled
			}
			got := mustCreate(t, s, tm)
			all = append(all, got.ID)
			if app == "a" {
				appA = append(appA, got.ID)
			}
			if tm.Status == dao.StatusDisabled {
				disabled = append(disabled, got.ID)
			}
		}
		deleted := mustCreate(t, s, newTimer("a", "deleted"))
		if err := s.DeleteTimer(ctx, deleted.ID, t0); err != nil {
			t.Fatal(err)
		}

		// Page through everything three at a time.
		var paged []int64
		after := int64(0)
		for pages := 0; ; pages++ {
			page, err := s.ListTimers(ctx, dao.ListTimersParams{AfterID: after, Limit: 3})
			if err != nil {
				t.Fatal(err)
			}
			if len(page) == 0 {
				if pages != 3 {
					t.Fatalf("got %d pages, want 3", pages)
				}
				break
			}
			paged = append(paged, timerIDs(page)...)
			after = page[len(page)-1].ID
		}
		if !slices.Equal(paged, all) {
			t.Fatalf("paged ids = %v, want %v", paged, all)
		}

		for _, tc := range []struct {
			name string
			p    dao.ListTimersParams
			want []int64
		}{
			{"DefaultLimit", dao.ListTimersParams{}, all},
			{"App", dao.ListTimersParams{App: "a"}, appA},
			{"Status", dao.ListTimersParams{Status: dao.StatusDisabled}, disabled},
			{"AppAndStatus", dao.ListTimersParams{App: "a", Status: dao.StatusDisabled}, disabled[:1]},
			{"AfterCursor", dao.ListTimersParams{AfterID: all[4]}, all[5:]},
			{"DeletedNeverListed", dao.ListTimersParams{Status: dao.StatusDeleted}, []int64{}},
			{"UnknownApp", dao.ListTimersParams{App: "zzz"}, []int64{}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				got, err := s.ListTimers(ctx, tc.p)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(timerIDs(got), tc.want) {
					t.Fatalf("ListTimers(%+v) = %v, want %v", tc.p, timerIDs(got), tc.want)
				}
			})
		}

		enabled, err := s.ListEnabledTimers(ctx, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		want := slices.DeleteFunc(slices.Clone(all), func(id int64) bool { return slices.Contains(disabled, id) })
		if !slices.Equal(timerIDs(enabled), want) {
			t.Fatalf("ListEnabledTimers = %v, want %v", timerIDs(enabled), want)
		}
		page, err := s.ListEnabledTimers(ctx, want[0], 2)
		if err != nil || !slices.Equal(timerIDs(page), want[1:3]) {
			t.Fatalf("ListEnabledTimers(after, 2) = %v, %v; want %v", timerIDs(page), err, want[1:3])
		}
	})
}

func TestUpdateTimer(t *testing.T) {
	t.Parallel()
	daotest.ForEachStore(t, func(t *testing.T, s *dao.Store) {
		ctx := context.Background()
		orig := newTimer("app", "orig")
		orig.RequestID, orig.RequestHash = "rq", "hh"
		tm := mustCreate(t, s, orig)
		other := mustCreate(t, s, newTimer("app", "other"))

		change := tm
		change.App, change.RequestID, change.CreatedMS = "ignored", "ignored", 1 // never written
		change.Name = "renamed"
		change.Status = dao.StatusDisabled
		change.Schedule = dao.JSONSpec(schedule.Spec{Cron: "0 * * * *", Timezone: "Europe/Berlin"})
		change.AnchorMS = t0 + 7
		change.Callback.URL = "https://example.com/x"
		change.Retry.MaxAttempts = 9
		got, err := s.UpdateTimer(ctx, change, 1, t0+100)
		if err != nil {
			t.Fatalf("UpdateTimer: %v", err)
		}
		want := change
		want.App, want.RequestID, want.CreatedMS = tm.App, tm.RequestID, tm.CreatedMS
		want.Version, want.UpdatedMS = 2, t0+100
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("UpdateTimer = %+v\nwant          %+v", got, want)
		}
		if read, _ := s.GetTimer(ctx, tm.ID); !reflect.DeepEqual(read, want) {
			t.Fatalf("GetTimer after update = %+v", read)
		}
		// The old name is free now.
		mustCreate(t, s, newTimer("app", "orig"))

		t.Run("VersionConflict", func(t *testing.T) {
			if _, err := s.UpdateTimer(ctx, change, 1, t0+200); !errors.Is(err, dao.ErrVersionConflict) {
				t.Fatalf("err = %v, want ErrVersionConflict", err)
			}
		})
		t.Run("NameTaken", func(t *testing.T) {
			c := got
			c.Name = other.Name
			if _, err := s.UpdateTimer(ctx, c, got.Version, t0+200); !errors.Is(err, dao.ErrNameTaken) {
				t.Fatalf("err = %v, want ErrNameTaken", err)
			}
		})
		t.Run("NotFound", func(t *testing.T) {
			c := got
			c.ID = other.ID + 1000
			if _, err := s.UpdateTimer(ctx, c, 1, t0+200); !errors.Is(err, dao.ErrNotFound) {
				t.Fatalf("err = %v, want ErrNotFound", err)
			}
		})
		t.Run("DeletedIsNotFound", func(t *testing.T) {
			if err := s.DeleteTimer(ctx, other.ID, t0+300); err != nil {
				t.Fatal(err)
			}
			if _, err := s.UpdateTimer(ctx, other, other.Version, t0+400); !errors.Is(err, dao.ErrNotFound) {
				t.Fatalf("err = %v, want ErrNotFound", err)
			}
		})
	})
}

func TestDeleteTimer(t *testing.T) {
	t.Parallel()
	daotest.ForEachStore(t, func(t *testing.T, s *dao.Store) {
		ctx := context.Background()
		tm := mustCreate(t, s, newTimer("app", "x"))
		if err := s.DeleteTimer(ctx, tm.ID, t0+1); err != nil {
			t.Fatalf("DeleteTimer: %v", err)
		}
		if _, err := s.GetTimer(ctx, tm.ID); !errors.Is(err, dao.ErrNotFound) {
			t.Fatalf("GetTimer(deleted) err = %v, want ErrNotFound", err)
		}
		if err := s.DeleteTimer(ctx, tm.ID, t0+2); !errors.Is(err, dao.ErrNotFound) {
			t.Fatalf("second DeleteTimer err = %v, want ErrNotFound", err)
		}
		if err := s.DeleteTimer(ctx, tm.ID+1000, t0+2); !errors.Is(err, dao.ErrNotFound) {
			t.Fatalf("DeleteTimer(missing) err = %v, want ErrNotFound", err)
		}
		// The version moved, so a claim at the old version fails.
		e, claimed, err := s.ClaimExecution(ctx, dao.ClaimParams{TimerID: tm.ID, ScheduledMS: t0, TimerVersion: 1, Owner: "i1", NowMS: t0})
		if err != nil || claimed || e.ID != 0 {
			t.Fatalf("claim of deleted timer = %+v, %v, %v", e, claimed, err)
		}
	})
}

func TestCompleteOneShot(t *testing.T) {
	t.Parallel()
	daotest.ForEachStore(t, func(t *testing.T, s *dao.Store) {
		ctx := context.Background()
		at := newTimer("app", "once")
		at.Schedule = dao.JSONSpec(schedule.Spec{At: "2026-01-01T00:05:00.000Z"})
		once := mustCreate(t, s, at)
		every := mustCreate(t, s, newTimer("app", "every"))
		dis := at
		dis.Name, dis.Status = "disabled-once", dao.StatusDisabled
		disabled := mustCreate(t, s, dis)

		// A stale version (the timer changed after its occurrence ran) is a no-op.
		if err := s.CompleteOneShot(ctx, once.ID, once.Version+1, t0+5); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.GetTimer(ctx, once.ID); got.Status != dao.StatusEnabled || got.Version != 1 {
			t.Fatalf("stale-version complete changed the timer: %+v", got)
		}
		for _, id := range []int64{once.ID, every.ID, disabled.ID, disabled.ID + 1000} {
			if err := s.CompleteOneShot(ctx, id, 1, t0+10); err != nil {
				t.Fatalf("CompleteOneShot(%d): %v", id, err)
			}
		}
		got, err := s.GetTimer(ctx, once.ID)
		if err != nil || got.Status != dao.StatusCompleted || got.Version != 2 || got.UpdatedMS != t0+10 {
			t.Fatalf("one-shot after complete = %+v, %v", got, err)
		}
		for _, tm := range []dao.Timer{every, disabled} {
			got, err := s.GetTimer(ctx, tm.ID)
			if err != nil || got.Status != tm.Status || got.Version != 1 {
				t.Fatalf("timer %s after complete = %+v, %v; want unchanged", tm.Name, got, err)
			}
		}
		// Completing twice is a no-op; a completed timer keeps its name.
		if err := s.CompleteOneShot(ctx, once.ID, 2, t0+20); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.GetTimer(ctx, once.ID); got.Version != 2 {
			t.Fatalf("version after second complete = %d, want 2", got.Version)
		}
		if _, _, err := s.CreateTimer(ctx, newTimer("app", "once"), t0); !errors.Is(err, dao.ErrNameTaken) {
			t.Fatalf("name of completed timer: err = %v, want ErrNameTaken", err)
		}
	})
}
