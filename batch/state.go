package batch

import (
	"github.com/tockd/tock/dao"
)

// Transitions of a task, for documentation and tests: from -> the statuses it may move to.
// A claim moves pending/rollback_pending to running/rollback_running; a release ends a run
// (or retries it); a take-back ends a run whose runner is gone like a timeout; cancel and
// rollback requests move tasks that are not running.
var Transitions = map[string][]string{
	dao.TaskPending:         {dao.TaskRunning, dao.TaskCancel},
	dao.TaskRunning:         {dao.TaskSuccess, dao.TaskFail, dao.TaskPending},
	dao.TaskSuccess:         {dao.TaskRollbackPending},
	dao.TaskFail:            {dao.TaskRollbackPending},
	dao.TaskCancel:          {},
	dao.TaskRollbackPending: {dao.TaskRollbackRunning},
	dao.TaskRollbackRunning: {dao.TaskRollbackSuccess, dao.TaskRollbackFail, dao.TaskRollbackPending},
	dao.TaskRollbackSuccess: {},
	dao.TaskRollbackFail:    {dao.TaskRollbackPending},
}

// aggregated is a batch's status and times as its tasks make them.
type aggregated struct {
	status                                    string
	startedMS, finishedMS, rollbackFinishedMS int64
}

// Aggregate computes a batch's status from the counts of its tasks' statuses. The seed's
// version compared success and fail counts with the total and left the status unchanged in
// every other case (a canceled or rolled-back task kept a batch "running" forever); here
// every combination has exactly one answer:
//
//   - cancel is sticky: the batch stays canceled; it is finished once nothing runs.
//   - in a rollback: rollback_running while any task waits for or runs its rollback, then
//     rollback_fail if any rollback failed, else rollback_success. Tasks that had nothing to
//     roll back keep their status and do not count.
//   - forward: pending until a task was claimed, running while any task is pending or
//     running, then success (no failure), fail (no success) or partial_fail.
func Aggregate(status string, counts map[string]int) string {
	n := func(s string) int { return counts[s] }
	switch status {
	case dao.BatchCancel:
		return dao.BatchCancel
	case dao.BatchRollbackRunning, dao.BatchRollbackSuccess, dao.BatchRollbackFail:
		switch {
		case n(dao.TaskRollbackPending)+n(dao.TaskRollbackRunning) > 0:
			return dao.BatchRollbackRunning
		case n(dao.TaskRollbackFail) > 0:
			return dao.BatchRollbackFail
		}
		return dao.BatchRollbackSuccess
	}
	switch {
	case n(dao.TaskPending)+n(dao.TaskRunning) > 0:
		if n(dao.TaskRunning)+n(dao.TaskSuccess)+n(dao.TaskFail) == 0 {
			return dao.BatchPending
		}
		return dao.BatchRunning
	case n(dao.TaskFail) == 0:
		return dao.BatchSuccess
	case n(dao.TaskSuccess) == 0:
		return dao.BatchFail
	}
	return dao.BatchPartialFail
}

// timesFunc returns the earliest start and latest finish among the tasks with statuses.
type timesFunc func(statuses ...string) (minStartedMS, maxFinishedMS int64, err error)

// aggregate computes what j's row should say given its tasks' counts. Times are read (one
// query each) only when they are about to be set: the start once, each finish once.
func aggregate(j dao.BatchJob, counts map[string]int, times timesFunc) (aggregated, error) {
	out := aggregated{
		status:             Aggregate(j.Status, counts),
		startedMS:          j.StartedMS,
		finishedMS:         j.FinishedMS,
		rollbackFinishedMS: j.RollbackFinishedMS,
	}
	var err error
	started := []string{dao.TaskRunning, dao.TaskSuccess, dao.TaskFail}
	if out.startedMS == 0 && counts[dao.TaskRunning]+counts[dao.TaskSuccess]+counts[dao.TaskFail] > 0 {
		if out.startedMS, _, err = times(started...); err != nil {
			return out, err
		}
	}
	lastFinish := func(statuses ...string) int64 {
		var m int64
		if err == nil {
			_, m, err = times(statuses...)
		}
		return m
	}
	switch out.status {
	case dao.BatchPending, dao.BatchRunning:
		out.finishedMS = 0
	case dao.BatchSuccess, dao.BatchFail, dao.BatchPartialFail:
		if out.finishedMS == 0 {
			out.finishedMS = lastFinish(dao.TaskSuccess, dao.TaskFail)
		}
	case dao.BatchCancel:
		if out.finishedMS == 0 && counts[dao.TaskPending]+counts[dao.TaskRunning] == 0 {
			out.finishedMS = max(lastFinish(dao.TaskSuccess, dao.TaskFail, dao.TaskCancel), j.UpdatedMS)
		}
	case dao.BatchRollbackRunning:
		out.rollbackFinishedMS = 0
	case dao.BatchRollbackSuccess, dao.BatchRollbackFail:
		if out.rollbackFinishedMS == 0 {
			out.rollbackFinishedMS = max(lastFinish(dao.TaskRollbackSuccess, dao.TaskRollbackFail), j.RollbackStartedMS)
		}
	}
	return out, err
}

// Finished reports whether a batch in status will change no more by itself (a rollback may
// still be asked for).
func Finished(j dao.BatchJob) bool {
	switch j.Status {
	case dao.BatchPending, dao.BatchRunning, dao.BatchRollbackRunning:
		return false
	case dao.BatchCancel:
		return j.FinishedMS != 0
	}
	return true
}
