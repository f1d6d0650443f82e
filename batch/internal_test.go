package batch

import (
	"strings"
	"testing"
	"time"

	"github.com/tockd/tock/dao"
)

func TestQueue(t *testing.T) {
	t.Parallel()
	q := newQueue(2)
	ref := func(id int64) dao.BatchTask { return dao.BatchTask{ID: id, BatchID: 1} }
	for _, c := range []struct {
		id   int64
		want pushResult
	}{{1, pushed}, {1, duplicate}, {2, pushed}, {3, full}, {2, duplicate}} {
		if got := q.push(ref(c.id)); got != c.want {
			t.Fatalf("push(%d) = %v, want %v", c.id, got, c.want)
		}
	}
	if q.len() != 2 || q.free() != 0 || q.cap() != 2 {
		t.Fatalf("len %d free %d cap %d", q.len(), q.free(), q.cap())
	}
	// Taken by a worker but not done: still a duplicate, so a scan cannot queue it twice.
	if r := <-q.ch; r.ID != 1 {
		t.Fatalf("took %d", r.ID)
	}
	if got := q.push(ref(1)); got != duplicate {
		t.Fatalf("push of a running task = %v", got)
	}
	q.done(1)
	if got := q.push(ref(1)); got != pushed {
		t.Fatalf("push after done = %v", got)
	}
}

func TestAggregate(t *testing.T) {
	t.Parallel()
	type counts = map[string]int
	for _, c := range []struct {
		status string
		counts counts
		want   string
	}{
		{dao.BatchPending, counts{dao.TaskPending: 3}, dao.BatchPending},
		{dao.BatchPending, counts{dao.TaskPending: 2, dao.TaskRunning: 1}, dao.BatchRunning},
		{dao.BatchRunning, counts{dao.TaskPending: 2, dao.TaskSuccess: 1}, dao.BatchRunning},
		{dao.BatchRunning, counts{dao.TaskSuccess: 3}, dao.BatchSuccess},
		{dao.BatchRunning, counts{dao.TaskFail: 3}, dao.BatchFail},
		{dao.BatchRunning, counts{dao.TaskSuccess: 2, dao.TaskFail: 1}, dao.BatchPartialFail},
		{dao.BatchCancel, counts{dao.TaskSuccess: 2, dao.TaskCancel: 5}, dao.BatchCancel},
		{dao.BatchCancel, counts{dao.TaskRunning: 1, dao.TaskCancel: 5}, dao.BatchCancel},
		{dao.BatchRollbackRunning, counts{dao.TaskRollbackPending: 1, dao.TaskRollbackSuccess: 1}, dao.BatchRollbackRunning},
		{dao.BatchRollbackRunning, counts{dao.TaskRollbackSuccess: 3, dao.TaskFail: 1}, dao.BatchRollbackSuccess},
		{dao.BatchRollbackRunning, counts{dao.TaskRollbackSuccess: 3, dao.TaskRollbackFail: 1}, dao.BatchRollbackFail},
		{dao.BatchRollbackRunning, counts{dao.TaskCancel: 3}, dao.BatchRollbackSuccess},
		{dao.BatchRollbackFail, counts{dao.TaskRollbackRunning: 1}, dao.BatchRollbackRunning},
	} {
		if got := Aggregate(c.status, c.counts); got != c.want {
			t.Errorf("Aggregate(%s, %v) = %s, want %s", c.status, c.counts, got, c.want)
		}
	}
}

func TestAggregateTimes(t *testing.T) {
	t.Parallel()
	var asked [][]string
	times := func(statuses ...string) (int64, int64, error) {
		asked = append(asked, statuses)
		return 110, 250, nil
	}
	j := dao.BatchJob{Status: dao.BatchRunning, CreatedMS: 100}
	a, err := aggregate(j, map[string]int{dao.TaskSuccess: 2, dao.TaskFail: 1}, times)
	if err != nil || a != (aggregated{status: dao.BatchPartialFail, startedMS: 110, finishedMS: 250}) || len(asked) != 2 {
		t.Fatalf("aggregate = %+v, %v; asked %v", a, err, asked)
	}
	// Set times are not read again.
	asked = nil
	j = dao.BatchJob{Status: dao.BatchPartialFail, StartedMS: 110, FinishedMS: 250}
	if a, _ := aggregate(j, map[string]int{dao.TaskSuccess: 2, dao.TaskFail: 1}, times); a.finishedMS != 250 || len(asked) != 0 {
		t.Fatalf("aggregate = %+v; asked %v", a, asked)
	}
	j = dao.BatchJob{Status: dao.BatchRollbackRunning, StartedMS: 110, FinishedMS: 250, RollbackStartedMS: 300}
	none := func(...string) (int64, int64, error) { return 0, 0, nil }
	a, _ = aggregate(j, map[string]int{dao.TaskFail: 1}, none)
	if a != (aggregated{status: dao.BatchRollbackSuccess, startedMS: 110, finishedMS: 250, rollbackFinishedMS: 300}) {
		t.Fatalf("empty rollback = %+v", a)
	}
}

// Every transition the worker, scanner, cancel and rollback make is in Transitions.
func TestTransitionsCoverEveryStatus(t *testing.T) {
	t.Parallel()
	for _, s := range dao.TaskStatuses {
		if _, ok := Transitions[s]; !ok {
			t.Errorf("no transitions for %s", s)
		}
	}
	for _, ph := range []phase{forward, rollback} {
		for _, to := range []string{ph.to} {
			if !contains(Transitions[ph.from], to) {
				t.Errorf("claim %s -> %s missing", ph.from, to)
			}
		}
		for _, to := range []string{ph.done, ph.failed, ph.retry} {
			if !contains(Transitions[ph.to], to) {
				t.Errorf("release %s -> %s missing", ph.to, to)
			}
		}
	}
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func TestConfig(t *testing.T) {
	t.Parallel()
	c := Config{}.WithDefaults()
	if c.QueueSize != 1000 || c.Workers != 32 || c.ScanInterval != 20*time.Second || c.MaxRetries != 2 {
		t.Fatalf("defaults = %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := Config{QueueSize: -1, Workers: -2, ScanInterval: -time.Second, MaxRetries: -1,
		Timeouts: map[string]time.Duration{"x": 0}}.WithDefaults()
	err := bad.Validate()
	for _, want := range []string{"queue_size", "workers", "scan_interval", "max_retries", "timeouts.x"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to name %s", err, want)
		}
	}
}
