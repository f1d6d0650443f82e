package batch

import (
	"context"
	"log/slog"
	"math/rand/v2"

	"github.com/tockd/tock/dao"
)

// maxBatchesPerPass bounds the unfinished batches one dispatch pass or scan looks at.
const maxBatchesPerPass = 1000

// dispatchLoop feeds the queue whenever it is woken: on create and rollback, when the queue
// has drained to half, and after every scan.
func (b *Batch) dispatchLoop(ctx context.Context) {
	defer b.loops.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.quit:
			return
		case <-b.wake:
		}
		if _, err := b.Dispatch(ctx); err != nil && ctx.Err() == nil {
			b.log.Warn("batch: dispatch", slog.Any("error", err))
		}
	}
}

// Dispatch queues the runnable tasks of unfinished batches, oldest batch first, until the
// queue is full, and returns how many it queued. Runnable is pending in a pending or running
// batch and rollback_pending in a rolling-back batch. It reads each batch's tasks from where
// its last pass stopped (see readPos), at most as many as the queue has room for. Each
// instance starts at its own random task and wraps around, so instances running the same
// batch mostly claim different tasks instead of racing for the same ones in the same order.
// The queue carries the tasks as read, so a worker claims without reading the task again; a
// task that moved meanwhile fails the claim's compare-and-set and is read afresh in a later
// round.
func (b *Batch) Dispatch(ctx context.Context) (int, error) {
	p := b.currentPool()
	if p == nil || p.q.free() == 0 {
		return 0, nil
	}
	jobs, err := b.store.ListUnfinishedBatches(ctx, maxBatchesPerPass)
	if err != nil {
		return 0, err
	}
	queued := 0
	for _, j := range jobs {
		var status string
		switch j.Status {
		case dao.BatchPending, dao.BatchRunning:
			status = dao.TaskPending
		case dao.BatchRollbackRunning:
			status = dao.TaskRollbackPending
		default:
			continue // canceled: nothing starts
		}
		if _, ok := b.handlers.get(j.Operation); !ok {
			continue
		}
		tasks, err := b.runnable(ctx, j, status, p.q.free())
		if err != nil {
			return queued, err
		}
		for _, r := range tasks {
			switch p.q.push(r) {
			case pushed:
				queued++
			case full:
				b.metrics.queueRejected.Inc()
				b.metrics.observeQueue(p.q)
				return queued, nil
			}
		}
	}
	b.metrics.observeQueue(p.q)
	return queued, nil
}

// readPos is where the dispatcher reads a batch's runnable tasks: it starts at a random
// task (its pivot), reads upward, wraps around to the batch's first task, stops at the pivot,
// and then starts over, picking up what went back to pending behind it (retries).
type readPos struct {
	pivot   int64
	after   int64 // last id queued
	wrapped bool
}

// runnable lists up to limit tasks of j with status from where the last call stopped: every
// task is read about once per round instead of once per pass.
func (b *Batch) runnable(ctx context.Context, j dao.BatchJob, status string, limit int) ([]dao.BatchTask, error) {
	pos, err := b.readPos(ctx, j)
	if err != nil || pos.pivot == 0 {
		return nil, err
	}
	var out []dao.BatchTask
	for round := 0; round < 3 && len(out) < limit; round++ {
		p := dao.ListBatchTasksParams{BatchID: j.ID, Status: status, AfterID: pos.after, Limit: limit - len(out)}
		if pos.wrapped {
			p.BeforeID = pos.pivot
		}
		tasks, err := b.store.ListBatchTasks(ctx, p)
		if err != nil {
			return out, err
		}
		out = append(out, tasks...)
		if len(tasks) > 0 {
			pos.after = tasks[len(tasks)-1].ID
		}
		if len(tasks) == p.Limit {
			break
		}
		// This stretch is done: wrap to the start, or start the next round at the pivot.
		if pos.wrapped {
			pos.after, pos.wrapped = pos.pivot-1, false
		} else {
			pos.after, pos.wrapped = 0, true
		}
	}
	b.jobsMu.Lock()
	b.positions[j.ID] = pos
	b.jobsMu.Unlock()
	return out, nil
}

// readPos returns this instance's read position in a batch, choosing its pivot the first
// time: a random id among the batch's tasks (one batch's ids are consecutive, but for
// concurrent inserts), so instances running the same batch start in different places.
func (b *Batch) readPos(ctx context.Context, j dao.BatchJob) (readPos, error) {
	b.jobsMu.Lock()
	pos, ok := b.positions[j.ID]
	b.jobsMu.Unlock()
	if ok {
		return pos, nil
	}
	first, err := b.store.ListBatchTasks(ctx, dao.ListBatchTasksParams{BatchID: j.ID, Limit: 1})
	if err != nil || len(first) == 0 {
		return readPos{}, err
	}
	pivot := first[0].ID + rand.Int64N(int64(max(j.Total, 1)))
	pos = readPos{pivot: pivot, after: pivot - 1}
	b.jobsMu.Lock()
	if len(b.positions) >= maxCachedJobs {
		clear(b.positions)
	}
	b.positions[j.ID] = pos
	b.jobsMu.Unlock()
	return pos, nil
}

// rewind makes the next pass of every batch start a new round at its pivot (after a scan,
// which may have returned tasks to pending anywhere).
func (b *Batch) rewind() {
	b.jobsMu.Lock()
	for id, pos := range b.positions {
		pos.after, pos.wrapped = pos.pivot-1, false
		b.positions[id] = pos
	}
	b.jobsMu.Unlock()
}
