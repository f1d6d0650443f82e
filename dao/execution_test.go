package dao_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/tockd/tock/dao"
	"github.com/tockd/tock/dao/daotest"
)

func TestClaimExecution(t *testing.T) {
	t.Parallel()
	daotest.ForEachStore(t, func(t *testing.T, s *dao.Store) {
		ctx := context.Background()
		tm := mustCreate(t, s, newTimer("app", "claim"))
		p := dao.ClaimParams{TimerID: tm.ID, ScheduledMS: t0 + 60_000, TimerVersion: tm.Version, Owner: "node-1", NowMS: t0 + 60_005}

		first, claimed, err := s.ClaimExecution(ctx, p)
		if err != nil || !claimed {
			t.Fatalf("first claim = %+v, %v, %v; want claimed", first, claimed, err)
		}
		want := dao.Execution{
			ID: first.ID, TimerID: tm.ID, ScheduledMS: p.ScheduledMS, Status: dao.ExecRunning, Attempt: 1,
			Owner: "node-1", TimerVersion: tm.Version, StartedMS: p.NowMS, CreatedMS: p.NowMS, UpdatedMS: p.NowMS,
		}
		if first.ID <= 0 || first != want {
			t.Fatalf("claimed row = %+v\nwant          %+v", first, want)
		}

		t.Run("DuplicateReturnsExisting", func(t *testing.T) {
			q := p
			q.Owner, q.NowMS = "node-2", p.NowMS+1
			got, claimed, err := s.ClaimExecution(ctx, q)
			if err != nil || claimed || got != first {
				t.Fatalf("second claim = %+v, %v, %v; want the first row, not claimed", got, claimed, err)
			}
		})
		t.Run("NextOccurrenceClaimable", func(t *testing.T) {
			q := p
			q.ScheduledMS += 60_000
			got, claimed, err := s.ClaimExecution(ctx, q)
			if err != nil || !claimed || got.ID == first.ID {
				t.Fatalf("claim of next occurrence = %+v, %v, %v", got, claimed, err)
			}
		})
		t.Run("WrongVersionNotClaimed", func(t *testing.T) {
			q := p
			q.ScheduledMS, q.TimerVersion = t0+600_000, tm.Version+1
			got, claimed, err := s.ClaimExecution(ctx, q)
			if err != nil || claimed || got.ID != 0 {
				t.Fatalf("claim at wrong version = %+v, %v, %v; want zero, not claimed", got, claimed, err)
			}
		})
		t.Run("MissingTimerNotClaimed", func(t *testing.T) {
			q := p
			q.TimerID = tm.ID + 1000
			got, claimed, err := s.ClaimExecution(ctx, q)
			if err != nil || claimed || got.ID != 0 {
				t.Fatalf("claim of missing timer = %+v, %v, %v", got, claimed, err)
			}
		})
		t.Run("DisabledNotClaimed", func(t *testing.T) {
			d := newTimer("app", "disabled")
			d.Status = dao.StatusDisabled
			dt := mustCreate(t, s, d)
			got, claimed, err := s.ClaimExecution(ctx, dao.ClaimParams{TimerID: dt.ID, ScheduledMS: t0, TimerVersion: dt.Version, Owner: "n", NowMS: t0})
			if err != nil || claimed || got.ID != 0 {
				t.Fatalf("claim of disabled timer = %+v, %v, %v", got, claimed, err)
			}
		})
		t.Run("UpdatedTimerNotClaimedAtOldVersion", func(t *testing.T) {
			u := mustCreate(t, s, newTimer("app", "updated"))
			if _, err := s.UpdateTimer(ctx, u, u.Version, t0+1); err != nil {
				t.Fatal(err)
			}
			got, claimed, err := s.ClaimExecution(ctx, dao.ClaimParams{TimerID: u.ID, ScheduledMS: t0, TimerVersion: u.Version, Owner: "n", NowMS: t0})
			if err != nil || claimed || got.ID != 0 {
				t.Fatalf("claim at old version = %+v, %v, %v", got, claimed, err)
			}
			got, claimed, err = s.ClaimExecution(ctx, dao.ClaimParams{TimerID: u.ID, ScheduledMS: t0, TimerVersion: u.Version + 1, Owner: "n", NowMS: t0})
			if err != nil || !claimed || got.TimerVersion != u.Version+1 {
				t.Fatalf("claim at new version = %+v, %v, %v", got, claimed, err)
			}
		})
		t.Run("ExistingReturnedEvenAfterTimerChanged", func(t *testing.T) {
			if err := s.DeleteTimer(ctx, tm.ID, t0+1); err != nil {
				t.Fatal(err)
			}
			got, claimed, err := s.ClaimExecution(ctx, p)
			if err != nil || claimed || got.ID != first.ID {
				t.Fatalf("claim after delete = %+v, %v, %v; want existing row", got, claimed, err)
			}
		})
	})
}

func TestClaimExecutionConcurrent(t *testing.T) {
	t.Parallel()
	daotest.ForEachStore(t, func(t *testing.T, s *dao.Store) {
		ctx := context.Background()
		tm := mustCreate(t, s, newTimer("app", "race"))
		const n = 20
		type result struct {
			e       dao.Execution
			claimed bool
			err     error
		}
		results := make(chan result, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				e, claimed, err := s.ClaimExecution(ctx, dao.ClaimParams{
					TimerID: tm.ID, ScheduledMS: t0, TimerVersion: tm.Version, Owner: fmt.Sprintf("node-%d", i), NowMS: t0,
				})
				results <- result{e, claimed, err}
			}()
		}
		close(start)
		wg.Wait()
		close(results)
		claimed, ids := 0, map[int64]bool{}
		var winner string
		for r := range results {
			if r.err != nil {
				t.Fatalf("claim: %v", r.err)
			}
			if r.claimed {
				claimed++
				winner = r.e.Owner
			}
			ids[r.e.ID] = true
		}
		if claimed != 1 || len(ids) != 1 {
			t.Fatalf("claimed %d times, %d distinct rows; want exactly 1 and 1", claimed, len(ids))
		}
		all, err := s.ListExecutions(ctx, dao.ListExecutionsParams{TimerID: tm.ID})
		if err != nil || len(all) != 1 || all[0].Owner != winner {
			t.Fatalf("rows = %+v, %v; want one row owned by %s", all, err, winner)
		}
	})
}

func TestFinishExecution(t *testing.T) {
	t.Parallel()
	daotest.ForEachStore(t, func(t *testing.T, s *dao.Store) {
		ctx := context.Background()
		tm := mustCreate(t, s, newTimer("app", "finish"))
		e, _, err := s.ClaimExecution(ctx, dao.ClaimParams{TimerID: tm.ID, ScheduledMS: t0, TimerVersion: 1, Owner: "node-1", NowMS: t0 + 3})
		if err != nil {
			t.Fatal(err)
		}
		longErr := strings.Repeat("é", 1500)                    // 2 bytes per character
		resp := strings.Repeat("🙂", 1023) + "\xff\xfe" + "tail" // 4-byte runes, invalid bytes
		p := dao.FinishParams{
			ID: e.ID, Owner: "node-1", Status: dao.ExecFailed, HTTPStatus: 503,
			Error: longErr, Response: resp, DurationMS: 42, NowMS: t0 + 50,
		}

		t.Run("WrongOwnerIsNotFound", func(t *testing.T) {
			q := p
			q.Owner = "node-2"
			if err := s.FinishExecution(ctx, q); !errors.Is(err, dao.ErrNotFound) {
				t.Fatalf("err = %v, want ErrNotFound", err)
			}
			q = p
			q.ID = e.ID + 1000
			if err := s.FinishExecution(ctx, q); !errors.Is(err, dao.ErrNotFound) {
				t.Fatalf("missing id: err = %v, want ErrNotFound", err)
			}
		})

		if err := s.FinishExecution(ctx, p); err != nil {
			t.Fatalf("FinishExecution: %v", err)
		}
		// The same write again (a retried request) is not "lost".
		if err := s.FinishExecution(ctx, p); err != nil {
			t.Fatalf("repeated FinishExecution: %v", err)
		}
		got, err := s.GetExecution(ctx, e.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != dao.ExecFailed || got.HTTPStatus != 503 || got.DurationMS != 42 ||
			got.FinishedMS != t0+50 || got.UpdatedMS != t0+50 || got.StartedMS != t0+3 || got.CreatedMS != t0+3 {
			t.Fatalf("finished row = %+v", got)
		}
		if got.Error != strings.Repeat("é", dao.MaxErrorLen) {
			t.Fatalf("error stored with %d characters, want %d é", utf8.RuneCountInString(got.Error), dao.MaxErrorLen)
		}
		wantResp := strings.Repeat("🙂", 1023) + "\uFFFD"
		if got.Response != wantResp {
			t.Fatalf("response stored as %d characters ending %q, want 1023 🙂 and U+FFFD",
				utf8.RuneCountInString(got.Response), got.Response[len(got.Response)-8:])
		}

		if _, err := s.GetExecution(ctx, e.ID+1000); !errors.Is(err, dao.ErrNotFound) {
			t.Fatalf("GetExecution(missing) err = %v, want ErrNotFound", err)
		}
	})
}

func TestListExecutions(t *testing.T) {
	t.Parallel()
	daotest.ForEachStore(t, func(t *testing.T, s *dao.Store) {
		ctx := context.Background()
		tm := mustCreate(t, s, newTimer("app", "list"))
		other := mustCreate(t, s, newTimer("app", "other"))
		claim := func(timer dao.Timer, at int64) dao.Execution {
			t.Helper()
			e, claimed, err := s.ClaimExecution(ctx, dao.ClaimParams{TimerID: timer.ID, ScheduledMS: at, TimerVersion: 1, Owner: "n", NowMS: at})
			if err != nil || !claimed {
				t.Fatalf("claim %d@%d: %v, %v", timer.ID, at, claimed, err)
			}
			return e
		}
		var all, succeeded []int64
		for i := range 6 {
			e := claim(tm, t0+int64(i)*60_000)
			claim(other, t0+int64(i)*60_000)
			all = append(all, e.ID)
			if i%2 == 0 {
				if err := s.FinishExecution(ctx, dao.FinishParams{ID: e.ID, Owner: "n", Status: dao.ExecSucceeded, HTTPStatus: 200, NowMS: t0}); err != nil {
					t.Fatal(err)
				}
				succeeded = append(succeeded, e.ID)
			}
		}

		for _, tc := range []struct {
			name string
			p    dao.ListExecutionsParams
			want []int64
		}{
			{"All", dao.ListExecutionsParams{TimerID: tm.ID}, all},
			{"Status", dao.ListExecutionsParams{TimerID: tm.ID, Status: dao.ExecSucceeded}, succeeded},
			{"Running", dao.ListExecutionsParams{TimerID: tm.ID, Status: dao.ExecRunning}, []int64{all[1], all[3], all[5]}},
			{"From", dao.ListExecutionsParams{TimerID: tm.ID, FromMS: t0 + 120_000}, all[2:]},
			{"ToExclusive", dao.ListExecutionsParams{TimerID: tm.ID, ToMS: t0 + 120_000}, all[:2]},
			{"FromTo", dao.ListExecutionsParams{TimerID: tm.ID, FromMS: t0 + 60_000, ToMS: t0 + 240_000}, all[1:4]},
			{"FromToStatus", dao.ListExecutionsParams{TimerID: tm.ID, FromMS: t0 + 60_000, ToMS: t0 + 240_000, Status: dao.ExecSucceeded}, all[2:3]},
			{"PageAfter", dao.ListExecutionsParams{TimerID: tm.ID, AfterID: all[1], Limit: 2}, all[2:4]},
			{"LastPage", dao.ListExecutionsParams{TimerID: tm.ID, AfterID: all[5], Limit: 2}, []int64{}},
			{"UnknownTimer", dao.ListExecutionsParams{TimerID: other.ID + 1000}, []int64{}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				got, err := s.ListExecutions(ctx, tc.p)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(execIDs(got), tc.want) {
					t.Fatalf("ListExecutions(%+v) = %v, want %v", tc.p, execIDs(got), tc.want)
				}
				for _, e := range got {
					if e.TimerID != tc.p.TimerID {
						t.Fatalf("row of timer %d listed for %d", e.TimerID, tc.p.TimerID)
					}
				}
			})
		}
	})
}

// A manual execution is pending, due at once, attempt 0: the retry poller claims it and makes
// attempt 1. Creating it twice returns the first; a timer not enabled gets none.
func TestCreateManualExecution(t *testing.T) {
	t.Parallel()
	daotest.ForEachStore(t, func(t *testing.T, s *dao.Store) {
		ctx := context.Background()
		tm := mustCreate(t, s, newTimer("app", "manual"))
		p := dao.ManualParams{TimerID: tm.ID, ScheduledMS: t0 + 7, NowMS: t0 + 10}
		first, created, err := s.CreateManualExecution(ctx, p)
		if err != nil || !created || !first.Manual || first.Status != dao.ExecPending || first.Attempt != 0 ||
			first.TimerVersion != tm.Version || first.ScheduledMS != p.ScheduledMS {
			t.Fatalf("create = %+v, %v, %v", first, created, err)
		}
		again, created, err := s.CreateManualExecution(ctx, dao.ManualParams{TimerID: tm.ID, ScheduledMS: t0 + 7, NowMS: t0 + 20})
		if err != nil || created || again != first {
			t.Fatalf("second create = %+v, %v, %v; want the first, not created", again, created, err)
		}
		claimed, err := s.ClaimDueRetries(ctx, dao.ClaimRetriesParams{Owner: "n1", NowMS: t0 + 10})
		if err != nil || len(claimed) != 1 || claimed[0].ID != first.ID || claimed[0].Attempt != 1 || !claimed[0].Manual {
			t.Fatalf("claim due = %+v, %v; want the manual execution at attempt 1", claimed, err)
		}

		off := newTimer("app", "manual-off")
		off.Status = dao.StatusDisabled
		off = mustCreate(t, s, off)
		got, created, err := s.CreateManualExecution(ctx, dao.ManualParams{TimerID: off.ID, ScheduledMS: t0, NowMS: t0})
		if err != nil || created || got.ID != 0 {
			t.Fatalf("disabled timer: %+v, %v, %v; want nothing", got, created, err)
		}
	})
}
