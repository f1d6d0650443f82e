package dao_test

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"sync"
	"testing"

	"github.com/tockd/tock/dao"
	"github.com/tockd/tock/dao/daotest"
	"github.com/tockd/tock/schedule"
)

// newBatch creates a batch over n fresh timers of app and returns it with its timers.
func newBatch(t *testing.T, s *dao.Store, app string, n int) (dao.BatchJob, []dao.Timer) {
	t.Helper()
	var timers []dao.Timer
	var ids []int64
	for i := range n {
		tm := mustCreate(t, s, newTimer(app, "t"+string(rune('a'+i))))
		timers = append(timers, tm)
		ids = append(ids, tm.ID)
	}
	j, existed, err := s.CreateBatch(context.Background(), dao.BatchJob{
		App: app, Operation: "disable", Target: `{"app":"` + app + `"}`,
	}, ids, t0)
	if err != nil || existed {
		t.Fatalf("CreateBatch = existed %v, err %v", existed, err)
	}
	return j, timers
}

func tasksOf(t *testing.T, s *dao.Store, batchID int64) []dao.BatchTask {
	t.Helper()
	ts, err := s.ListBatchTasks(context.Background(), dao.ListBatchTasksParams{BatchID: batchID, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

func claim(t *testing.T, s *dao.Store, task dao.BatchTask, owner string, now int64) (dao.BatchTask, bool) {
	t.Helper()
	ok, err := s.ClaimBatchTask(context.Background(), dao.ClaimBatchTaskParams{
		ID: task.ID, Version: task.Version, From: dao.TaskPending, To: dao.TaskRunning,
		BatchStatuses: []string{dao.BatchPending, dao.BatchRunning}, Owner: owner, NowMS: now, DeadlineMS: now + 1000,
	})
	if err != nil {
		t.Fatalf("ClaimBatchTask: %v", err)
	}
	if !ok {
		return dao.BatchTask{}, false
	}
	got, err := s.GetBatchTask(context.Background(), task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != task.Version+1 || got.Status != dao.TaskRunning || got.Owner != owner || got.StartedMS != now {
		t.Fatalf("claimed task = %+v", got)
	}
	return got, true
}

func TestCreateBatch(t *testing.T) {
	t.Parallel()
	daotest.ForEachStore(t, func(t *testing.T, s *dao.Store) {
		ctx := context.Background()
		j, timers := newBatch(t, s, "app", 3)
		if j.ID <= 0 || j.Status != dao.BatchPending || j.Version != 1 || j.Total != 3 || j.CreatedMS != t0 {
			t.Fatalf("created %+v", j)
		}
		read, err := s.GetBatch(ctx, j.ID)
		if err != nil || !reflect.DeepEqual(read, j) {
			t.Fatalf("GetBatch = %+v, %v\nwant %+v", read, err, j)
		}
		tasks := tasksOf(t, s, j.ID)
		if len(tasks) != 3 {
			t.Fatalf("%d tasks", len(tasks))
		}
		window, err := s.ListBatchTasks(ctx, dao.ListBatchTasksParams{BatchID: j.ID, Status: dao.TaskPending,
			AfterID: tasks[0].ID - 1, BeforeID: tasks[2].ID, Limit: 10})
		if err != nil || len(window) != 2 || window[0].ID != tasks[0].ID || window[1].ID != tasks[1].ID {
			t.Fatalf("ListBatchTasks(window) = %+v, %v", window, err)
		}
		for i, task := range tasks {
			if task.TimerID != timers[i].ID || task.Status != dao.TaskPending || task.Version != 1 || task.Before.Valid || task.After.Valid {
				t.Errorf("task %d = %+v", i, task)
			}
		}
		if _, err := s.GetBatch(ctx, j.ID+100); !errors.Is(err, dao.ErrNotFound) {
			t.Fatalf("GetBatch(missing) = %v", err)
		}

		t.Run("RequestIDReturnsTheFirst", func(t *testing.T) {
			in := dao.BatchJob{App: "app", Operation: "enable", Target: "{}", RequestID: "r1", RequestHash: "h1"}
			first, existed, err := s.CreateBatch(ctx, in, []int64{timers[0].ID}, t0)
			if err != nil || existed {
				t.Fatal(existed, err)
			}
			in.RequestHash = "h2"
			again, existed, err := s.CreateBatch(ctx, in, []int64{timers[0].ID, timers[1].ID}, t0+1)
			if err != nil || !existed || again.ID != first.ID || again.RequestHash != "h1" || again.Total != 1 {
				t.Fatalf("again = %+v existed %v err %v", again, existed, err)
			}
			if got := tasksOf(t, s, first.ID); len(got) != 1 {
				t.Fatalf("replay added tasks: %d", len(got))
			}
			byKey, err := s.BatchByRequestID(ctx, "r1")
			if err != nil || byKey.ID != first.ID {
				t.Fatalf("BatchByRequestID = %+v, %v", byKey, err)
			}
		})
		t.Run("NoTimersIsAnError", func(t *testing.T) {
			if _, _, err := s.CreateBatch(ctx, dao.BatchJob{Operation: "x", Target: "{}"}, nil, t0); err == nil {
				t.Fatal("no error")
			}
		})
		t.Run("ListAndUnfinished", func(t *testing.T) {
			other, _ := newBatch(t, s, "other", 1)
			got, err := s.ListBatches(ctx, dao.ListBatchesParams{App: "other"})
			if err != nil || len(got) != 1 || got[0].ID != other.ID {
				t.Fatalf("ListBatches(app) = %+v, %v", got, err)
			}
			got, err = s.ListBatches(ctx, dao.ListBatchesParams{Status: dao.BatchPending, AfterID: j.ID})
			if err != nil || len(got) == 0 || got[0].ID <= j.ID {
				t.Fatalf("ListBatches(after) = %+v, %v", got, err)
			}
			if _, _, err := s.CancelBatch(ctx, other.ID, t0); err != nil {
				t.Fatal(err)
			}
			un, err := s.ListUnfinishedBatches(ctx, 100)
			if err != nil {
				t.Fatal(err)
			}
			// A canceled batch stays unfinished until its finish time is written.
			if !slices.Contains(batchIDs(un), other.ID) || !slices.Contains(batchIDs(un), j.ID) {
				t.Fatalf("unfinished = %v", batchIDs(un))
			}
		})
	})
}

func batchIDs(js []dao.BatchJob) []int64 { return ids(js, func(j dao.BatchJob) int64 { return j.ID }) }

func TestClaimJournalRelease(t *testing.T) {
	t.Parallel()
	daotest.ForEachStore(t, func(t *testing.T, s *dao.Store) {
		ctx := context.Background()
		j, timers := newBatch(t, s, "app", 2)
		tasks := tasksOf(t, s, j.ID)

		t.Run("OneOfConcurrentClaimersWins", func(t *testing.T) {
			var wg sync.WaitGroup
			var mu sync.Mutex
			won := 0
			for i := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ok, err := s.ClaimBatchTask(ctx, dao.ClaimBatchTaskParams{
						ID: tasks[0].ID, Version: tasks[0].Version, From: dao.TaskPending, To: dao.TaskRunning,
						BatchStatuses: []string{dao.BatchPending}, Owner: "o" + string(rune('0'+i)), NowMS: t0, DeadlineMS: t0 + 10,
					})
					if err != nil {
						t.Error(err)
					}
					if ok {
						mu.Lock()
						won++
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			if won != 1 {
				t.Fatalf("%d claims won, want 1", won)
			}
		})

		got, err := s.GetBatchTask(ctx, tasks[0].ID)
		if err != nil || got.Status != dao.TaskRunning || got.Version != 2 || got.StartedMS != t0 || got.DeadlineMS != t0+10 {
			t.Fatalf("claimed task = %+v, %v", got, err)
		}
		before := timers[0]
		after := before
		after.Status, after.Version = dao.StatusDisabled, before.Version+1
		after.Callback.Headers = map[string]string{"X-Ü": "✓"}

		t.Run("JournalFencesAStaleVersion", func(t *testing.T) {
			if _, err := s.JournalBatchTask(ctx, got.ID, got.Version-1, before, after, t0); !errors.Is(err, dao.ErrVersionConflict) {
				t.Fatalf("stale journal = %v", err)
			}
		})
		v, err := s.JournalBatchTask(ctx, got.ID, got.Version, before, after, t0+1)
		if err != nil || v != got.Version+1 {
			t.Fatalf("JournalBatchTask = %d, %v", v, err)
		}
		read, _ := s.GetBatchTask(ctx, got.ID)
		if !read.Before.Valid || !reflect.DeepEqual(read.Before.Timer, before) || !reflect.DeepEqual(read.After.Timer, after) {
			t.Fatalf("images did not round-trip:\n%+v\n%+v", read.Before, read.After)
		}

		if err := s.ReleaseBatchTask(ctx, dao.ReleaseBatchTaskParams{ID: got.ID, Version: got.Version, Status: dao.TaskSuccess, NowMS: t0}); !errors.Is(err, dao.ErrVersionConflict) {
			t.Fatalf("release at the claim's version after a journal = %v, want conflict", err)
		}
		long := string(make([]rune, dao.MaxBatchErrorLen+10))
		if err := s.ReleaseBatchTask(ctx, dao.ReleaseBatchTaskParams{ID: got.ID, Version: v, Status: dao.TaskSuccess, Error: long, NowMS: t0 + 5}); err != nil {
			t.Fatal(err)
		}
		read, _ = s.GetBatchTask(ctx, got.ID)
		if read.Status != dao.TaskSuccess || read.FinishedMS != t0+5 || read.DeadlineMS != 0 || !read.After.Valid ||
			len([]rune(read.Error)) != dao.MaxBatchErrorLen {
			t.Fatalf("released = %+v", read)
		}

		t.Run("CountsAndTimesByStatus", func(t *testing.T) {
			c, err := s.CountBatchTasks(ctx, j.ID)
			if err != nil {
				t.Fatal(err)
			}
			if want := map[string]int{dao.TaskSuccess: 1, dao.TaskPending: 1}; !reflect.DeepEqual(c, want) {
				t.Fatalf("counts = %+v, want %+v", c, want)
			}
			started, finished, err := s.BatchTaskTimes(ctx, j.ID, dao.TaskSuccess, dao.TaskFail)
			if err != nil || started != t0 || finished != t0+5 {
				t.Fatalf("times = %d, %d, %v", started, finished, err)
			}
			started, finished, err = s.BatchTaskTimes(ctx, j.ID, dao.TaskFail)
			if err != nil || started != 0 || finished != 0 {
				t.Fatalf("times of no task = %d, %d, %v", started, finished, err)
			}
		})
		t.Run("ClaimRefusedOnceCanceled", func(t *testing.T) {
			canceled, n, err := s.CancelBatch(ctx, j.ID, t0+6)
			if err != nil || n != 1 || canceled.Status != dao.BatchCancel {
				t.Fatalf("CancelBatch = %+v, %d, %v", canceled, n, err)
			}
			if _, ok := claim(t, s, tasks[1], "late", t0+7); ok {
				t.Fatal("claimed a task of a canceled batch")
			}
			if read, _ := s.GetBatchTask(ctx, tasks[1].ID); read.Status != dao.TaskCancel {
				t.Fatalf("pending task after cancel = %s", read.Status)
			}
			again, _, err := s.CancelBatch(ctx, j.ID, t0+8)
			if !errors.Is(err, dao.ErrBatchState) || again.Status != dao.BatchCancel {
				t.Fatalf("second cancel = %+v, %v", again, err)
			}
		})
	})
}

func TestStartBatchRollback(t *testing.T) {
	t.Parallel()
	daotest.ForEachStore(t, func(t *testing.T, s *dao.Store) {
		ctx := context.Background()
		j, timers := newBatch(t, s, "app", 3)
		if _, _, err := s.StartBatchRollback(ctx, j.ID, t0); !errors.Is(err, dao.ErrBatchState) {
			t.Fatalf("rollback of a pending batch = %v", err)
		}
		tasks := tasksOf(t, s, j.ID)
		// Task 0 succeeds with images, task 1 fails before recording any, task 2 succeeds
		// without images (nothing to restore).
		for i, task := range tasks {
			c, ok := claim(t, s, task, "o", t0)
			if !ok {
				t.Fatal("claim failed")
			}
			p := dao.ReleaseBatchTaskParams{ID: c.ID, Version: c.Version, Status: dao.TaskSuccess, NowMS: t0 + 1}
			switch i {
			case 0:
				p.Before, p.After = &timers[0], &timers[0]
			case 1:
				p.Status, p.Error = dao.TaskFail, "boom"
			}
			if err := s.ReleaseBatchTask(ctx, p); err != nil {
				t.Fatal(err)
			}
		}
		cur, _ := s.GetBatch(ctx, j.ID)
		if _, err := s.SetBatchStatus(ctx, dao.BatchStatusParams{ID: j.ID, ExpectVersion: cur.Version - 1, Status: dao.BatchPartialFail, NowMS: t0}); !errors.Is(err, dao.ErrVersionConflict) {
			t.Fatalf("stale SetBatchStatus = %v", err)
		}
		done, err := s.SetBatchStatus(ctx, dao.BatchStatusParams{ID: j.ID, ExpectVersion: cur.Version, Status: dao.BatchPartialFail,
			StartedMS: t0, FinishedMS: t0 + 1, NowMS: t0 + 2})
		if err != nil || done.Status != dao.BatchPartialFail || done.FinishedMS != t0+1 || done.Version != cur.Version+1 {
			t.Fatalf("SetBatchStatus = %+v, %v", done, err)
		}
		rb, n, err := s.StartBatchRollback(ctx, j.ID, t0+3)
		if err != nil || n != 1 || rb.Status != dao.BatchRollbackRunning || rb.RollbackStartedMS != t0+3 {
			t.Fatalf("StartBatchRollback = %+v, %d, %v", rb, n, err)
		}
		got := tasksOf(t, s, j.ID)
		if got[0].Status != dao.TaskRollbackPending || got[1].Status != dao.TaskFail || got[2].Status != dao.TaskSuccess {
			t.Fatalf("statuses = %s %s %s", got[0].Status, got[1].Status, got[2].Status)
		}
		if _, _, err := s.StartBatchRollback(ctx, j.ID, t0+4); !errors.Is(err, dao.ErrBatchState) {
			t.Fatalf("rollback while rolling back = %v", err)
		}
	})
}

func TestTakeBackBatchTasks(t *testing.T) {
	t.Parallel()
	daotest.ForEachStore(t, func(t *testing.T, s *dao.Store) {
		ctx := context.Background()
		j, _ := newBatch(t, s, "app", 3)
		tasks := tasksOf(t, s, j.ID)
		a, _ := claim(t, s, tasks[0], "dead", t0)      // deadline t0+1000
		b, _ := claim(t, s, tasks[1], "alive", t0+500) // deadline t0+1500
		_ = b

		n, err := s.TakeBackBatchTasks(ctx, dao.TakeBackParams{BatchID: j.ID, NowMS: t0 + 1000, MaxRetries: 2})
		if err != nil || n != 0 {
			t.Fatalf("before any deadline: %d, %v", n, err)
		}
		n, err = s.TakeBackBatchTasks(ctx, dao.TakeBackParams{BatchID: j.ID, NowMS: t0 + 1001, MaxRetries: 2})
		if err != nil || n != 1 {
			t.Fatalf("after a's deadline: %d, %v", n, err)
		}
		got, _ := s.GetBatchTask(ctx, a.ID)
		if got.Status != dao.TaskPending || got.Retry != 1 || got.Error == "" {
			t.Fatalf("taken back = %+v", got)
		}
		// The old claim's release is dropped.
		if err := s.ReleaseBatchTask(ctx, dao.ReleaseBatchTaskParams{ID: a.ID, Version: a.Version, Status: dao.TaskSuccess, NowMS: t0}); !errors.Is(err, dao.ErrVersionConflict) {
			t.Fatalf("stale release = %v", err)
		}

		t.Run("ByOwnerWhateverTheDeadline", func(t *testing.T) {
			n, err := s.TakeBackBatchTasks(ctx, dao.TakeBackParams{BatchID: j.ID, Owner: "alive", NowMS: t0, MaxRetries: 2})
			if err != nil || n != 1 {
				t.Fatalf("by owner: %d, %v", n, err)
			}
		})
		t.Run("OutOfRetriesFails", func(t *testing.T) {
			c := tasks[2]
			for range 3 {
				cur, _ := s.GetBatchTask(ctx, c.ID)
				if _, ok := claim(t, s, cur, "x", t0); !ok {
					t.Fatalf("claim of %+v failed", cur)
				}
				if _, err := s.TakeBackBatchTasks(ctx, dao.TakeBackParams{BatchID: j.ID, Owner: "x", NowMS: t0, MaxRetries: 2}); err != nil {
					t.Fatal(err)
				}
			}
			got, _ := s.GetBatchTask(ctx, c.ID)
			if got.Status != dao.TaskFail || got.Retry != 2 {
				t.Fatalf("after 3 lost runs: %+v", got)
			}
		})
	})
}

func TestRestoreTimer(t *testing.T) {
	t.Parallel()
	daotest.ForEachStore(t, func(t *testing.T, s *dao.Store) {
		ctx := context.Background()
		orig := mustCreate(t, s, newTimer("app", "keep-me"))
		if err := s.DeleteTimer(ctx, orig.ID, t0+1); err != nil {
			t.Fatal(err)
		}
		deleted, err := s.GetTimerAny(ctx, orig.ID)
		if err != nil || deleted.Status != dao.StatusDeleted || deleted.Version != 2 {
			t.Fatalf("GetTimerAny = %+v, %v", deleted, err)
		}
		if _, err := s.RestoreTimer(ctx, orig, 1, t0+2); !errors.Is(err, dao.ErrVersionConflict) {
			t.Fatalf("restore at a stale version = %v", err)
		}
		t.Run("NameTakenMeanwhile", func(t *testing.T) {
			other := mustCreate(t, s, newTimer("app", "keep-me"))
			if _, err := s.RestoreTimer(ctx, orig, 2, t0+2); !errors.Is(err, dao.ErrNameTaken) {
				t.Fatalf("restore over a taken name = %v", err)
			}
			if err := s.DeleteTimer(ctx, other.ID, t0+2); err != nil {
				t.Fatal(err)
			}
		})
		back, err := s.RestoreTimer(ctx, orig, 2, t0+3)
		if err != nil || back.Version != 3 || back.UpdatedMS != t0+3 || !dao.TimerContentEqual(back, orig) {
			t.Fatalf("RestoreTimer = %+v, %v", back, err)
		}
		if live, err := s.GetTimer(ctx, orig.ID); err != nil || live.Status != dao.StatusEnabled {
			t.Fatalf("restored timer is not live: %+v, %v", live, err)
		}
		if _, err := s.RestoreTimer(ctx, dao.Timer{ID: orig.ID + 99, Status: dao.StatusEnabled}, 1, t0); !errors.Is(err, dao.ErrNotFound) {
			t.Fatalf("restore of a missing timer = %v", err)
		}
		if _, err := s.RestoreTimer(ctx, deleted, 3, t0); err == nil {
			t.Fatal("restoring a deleted image succeeded")
		}
	})
}

func TestSelectTimerIDs(t *testing.T) {
	t.Parallel()
	daotest.ForEachStore(t, func(t *testing.T, s *dao.Store) {
		ctx := context.Background()
		a := mustCreate(t, s, newTimer("sel", "Job-1"))
		b := mustCreate(t, s, newTimer("sel", "job-2"))
		c := newTimer("sel", "jöb-3")
		c.Status = dao.StatusDisabled
		cc := mustCreate(t, s, c)
		d := mustCreate(t, s, newTimer("sel", "job-4"))
		_ = mustCreate(t, s, newTimer("other", "job-5"))
		if err := s.DeleteTimer(ctx, d.ID, t0); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			sel  dao.TimerSelector
			want []int64
		}{
			{dao.TimerSelector{App: "sel"}, []int64{a.ID, b.ID, cc.ID}},
			{dao.TimerSelector{App: "sel", NamePrefix: "job-"}, []int64{b.ID}},
			{dao.TimerSelector{App: "sel", NamePrefix: "J"}, []int64{a.ID}},
			{dao.TimerSelector{App: "sel", NamePrefix: "jö"}, []int64{cc.ID}},
			{dao.TimerSelector{App: "sel", Status: dao.StatusEnabled}, []int64{a.ID, b.ID}},
			{dao.TimerSelector{App: "sel", Status: dao.StatusDeleted}, []int64{}},
			{dao.TimerSelector{App: "none"}, []int64{}},
		} {
			got, err := s.SelectTimerIDs(ctx, tc.sel, 100)
			if err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("SelectTimerIDs(%+v) = %v, %v; want %v", tc.sel, got, err, tc.want)
			}
		}
		if got, _ := s.SelectTimerIDs(ctx, dao.TimerSelector{App: "sel"}, 2); len(got) != 2 {
			t.Errorf("limit 2 gave %v", got)
		}
	})
}

// Every field of Timer survives an image, so a field added to Timer later cannot be lost by
// a batch and its rollback unnoticed.
func TestTimerImageKeepsEveryField(t *testing.T) {
	t.Parallel()
	var in dao.Timer
	v := reflect.ValueOf(&in).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString("s" + v.Type().Field(i).Name)
		case reflect.Int64, reflect.Int:
			f.SetInt(int64(i + 1))
		}
	}
	in.Schedule = dao.JSONSpec(schedule.Spec{Cron: "0 * * * *", Timezone: "Europe/Berlin"})
	in.Callback = dao.Callback{URL: "u", Method: "POST", Headers: map[string]string{"a": "b"}, Body: "x", TimeoutMS: 7}
	in.Retry = dao.RetryPolicy{MaxAttempts: 1, BackoffMS: 2, MaxBackoffMS: 3}
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Fatalf("test does not set Timer.%s", v.Type().Field(i).Name)
		}
	}
	val, err := dao.Image(in).Value()
	if err != nil {
		t.Fatal(err)
	}
	var out dao.TimerImage
	if err := out.Scan(val); err != nil {
		t.Fatal(err)
	}
	if !out.Valid || !reflect.DeepEqual(out.Timer, in) {
		t.Fatalf("image lost a field:\n in %+v\nout %+v", in, out.Timer)
	}
}

func TestTimerContentEqual(t *testing.T) {
	t.Parallel()
	a := newTimer("app", "x")
	b := a
	b.ID, b.Version, b.UpdatedMS = 9, 7, 5
	b.Callback.Headers = map[string]string{"X-A": "b"}
	if !dao.TimerContentEqual(a, b) {
		t.Fatal("identity and version should not matter")
	}
	a.Callback.Headers, b.Callback.Headers = nil, map[string]string{}
	if !dao.TimerContentEqual(a, b) {
		t.Fatal("nil and empty headers differ")
	}
	for name, change := range map[string]func(*dao.Timer){
		"status":   func(t *dao.Timer) { t.Status = dao.StatusDisabled },
		"schedule": func(t *dao.Timer) { t.Schedule = dao.JSONSpec(schedule.Spec{Every: "2m"}) },
		"anchor":   func(t *dao.Timer) { t.AnchorMS++ },
		"url":      func(t *dao.Timer) { t.Callback.URL += "x" },
		"header":   func(t *dao.Timer) { t.Callback.Headers = map[string]string{"X-A": "c"} },
		"retry":    func(t *dao.Timer) { t.Retry.MaxAttempts++ },
		"name":     func(t *dao.Timer) { t.Name += "y" },
		"misfire":  func(t *dao.Timer) { t.Misfire = "skip" },
	} {
		c := a
		change(&c)
		if dao.TimerContentEqual(a, c) {
			t.Errorf("%s change not seen", name)
		}
	}
}
