package batch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"

	"github.com/tockd/tock/dao"
)

// pool is one generation of the queue and its fixed set of workers. A restart (see scan.go)
// replaces the whole generation: the old one's queued refs are dropped (the tasks are still
// pending in the store) and its workers end after the task each is on.
type pool struct {
	q      *queue
	ctx    context.Context // canceled by a restart: handlers of a stalled pool are told to end
	cancel context.CancelFunc
	quit   chan struct{} // closed to end the workers after their current task
	once   sync.Once
	busy   atomic.Int64
	taken  atomic.Int64 // tasks workers took from the queue, to see whether it drains
}

func (p *pool) stop() { p.once.Do(func() { close(p.quit) }) }

// startPool starts a generation of Config.Workers workers. b.mu is held.
func (b *Batch) startPool() *pool {
	ctx, cancel := context.WithCancel(b.runCtx)
	p := &pool{q: newQueue(b.cfg.QueueSize), ctx: ctx, cancel: cancel, quit: make(chan struct{})}
	b.workers.Add(b.cfg.Workers)
	b.metrics.workers.Set(float64(b.cfg.Workers))
	for range b.cfg.Workers {
		go b.work(p)
	}
	return p
}

// currentPool is the generation the dispatcher feeds.
func (b *Batch) currentPool() *pool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.pool
}

// work is one worker: it takes tasks from its generation's queue until told to end.
func (b *Batch) work(p *pool) {
	defer b.workers.Done()
	for {
		// Checked first: select picks at random among ready cases, and a stopped pool must
		// not take more of its queue.
		select {
		case <-p.quit:
			return
		case <-p.ctx.Done():
			return
		default:
		}
		select {
		case <-p.quit:
			return
		case <-p.ctx.Done():
			return
		case task := <-p.q.ch:
			p.taken.Add(1)
			p.busy.Add(1)
			b.metrics.busyWorkers.Inc()
			b.metrics.observeQueue(p.q)
			b.runTask(p.ctx, task)
			b.metrics.busyWorkers.Dec()
			p.busy.Add(-1)
			p.q.done(task.ID)
			if p.q.len() <= p.q.cap()/2 {
				b.wakeDispatcher()
			}
		}
	}
}

// phase of a task run.
type phase struct {
	name                string // forward or rollback
	from, to            string
	done, failed, retry string
	batchStatuses       []string
}

var (
	forward = phase{
		name: "forward", from: dao.TaskPending, to: dao.TaskRunning,
		done: dao.TaskSuccess, failed: dao.TaskFail, retry: dao.TaskPending,
		batchStatuses: []string{dao.BatchPending, dao.BatchRunning},
	}
	rollback = phase{
		name: "rollback", from: dao.TaskRollbackPending, to: dao.TaskRollbackRunning,
		done: dao.TaskRollbackSuccess, failed: dao.TaskRollbackFail, retry: dao.TaskRollbackPending,
		batchStatuses: []string{dao.BatchRollbackRunning},
	}
)

// runTask claims one task, runs its handler under the handler's timeout and records the
// outcome, each step a compare-and-set on the task's version. ctx ending means the runner
// stops abruptly: the claim is then left as it is, for a take-back.
func (b *Batch) runTask(ctx context.Context, task dao.BatchTask) {
	log := b.log.With(slog.Int64("batch_id", task.BatchID), slog.Int64("task_id", task.ID))
	var ph phase
	switch task.Status {
	case dao.TaskPending:
		ph = forward
	case dao.TaskRollbackPending:
		ph = rollback
	default:
		return
	}
	job, err := b.job(ctx, task.BatchID)
	if err != nil {
		if ctx.Err() == nil {
			log.Warn("batch: read batch of task", slog.Any("error", err))
		}
		return
	}
	h, ok := b.handlers.get(job.Operation)
	if !ok {
		// Another instance (a newer version) may have the handler: leave the task to it.
		log.Warn("batch: no handler for the operation here; leaving the task", slog.String("operation", job.Operation))
		return
	}
	timeout := b.timeout(h)
	start := b.clock.Now()
	claim := dao.ClaimBatchTaskParams{
		ID: task.ID, Version: task.Version, From: ph.from, To: ph.to, BatchStatuses: ph.batchStatuses,
		Owner: b.instance, NowMS: start.UnixMilli(), DeadlineMS: start.Add(timeout + b.cfg.LeaseGrace).UnixMilli(),
	}
	ok, err = b.store.ClaimBatchTask(ctx, claim)
	if err != nil || !ok {
		if err != nil && ctx.Err() == nil {
			log.Warn("batch: claim task", slog.Any("error", err))
		}
		b.metrics.tasks.WithLabelValues(job.Operation, ph.name, outcomeLost).Inc()
		return
	}
	claimed := task
	claimed.Status, claimed.Version, claimed.Owner = ph.to, task.Version+1, claim.Owner
	claimed.DeadlineMS, claimed.StartedMS, claimed.FinishedMS, claimed.Error = claim.DeadlineMS, claim.NowMS, 0, ""
	claimed.UpdatedMS = claim.NowMS

	// After the outcome is written, so the refresh that follows sees it.
	defer b.markDirty(job.ID)

	w := &Work{Job: job, Task: claimed, b: b, version: claimed.Version}
	hctx, cancel := withTimeout(ctx, b.clock, timeout)
	err = b.call(hctx, h, ph, w)
	timedOut := errors.Is(hctx.Err(), context.DeadlineExceeded)
	cancel()

	if ctx.Err() != nil {
		// Stopped abruptly (or this pool was restarted): leave the claim to a take-back, as
		// a crash would.
		b.metrics.tasks.WithLabelValues(job.Operation, ph.name, outcomeAborted).Inc()
		return
	}
	if errors.Is(err, ErrTaskLost) {
		b.metrics.tasks.WithLabelValues(job.Operation, ph.name, outcomeLost).Inc()
		log.Info("batch: task was taken back while running; dropping this run")
		return
	}
	rel := dao.ReleaseBatchTaskParams{ID: claimed.ID, Version: w.version, Status: ph.done, Retry: claimed.Retry,
		Before: w.before, After: w.after, NowMS: b.clock.Now().UnixMilli()}
	outcome := outcomeSuccess
	if err != nil {
		rel.Error = err.Error()
		if timedOut {
			rel.Error = fmt.Sprintf("timed out after %s: %v", timeout, err)
		}
		// A timeout is retried whatever the handler made of it.
		switch {
		case (timedOut || !IsPermanent(err)) && claimed.Retry < b.cfg.MaxRetries:
			rel.Status, rel.Retry, outcome = ph.retry, claimed.Retry+1, outcomeRetry
		default:
			rel.Status, outcome = ph.failed, outcomeFail
		}
	}
	if err := b.store.ReleaseBatchTask(ctx, rel); err != nil {
		if errors.Is(err, dao.ErrVersionConflict) {
			b.metrics.tasks.WithLabelValues(job.Operation, ph.name, outcomeLost).Inc()
			log.Info("batch: task was taken back before its outcome was written; dropping it")
			return
		}
		// The claim stays; its deadline brings it back.
		log.Warn("batch: write task outcome", slog.Any("error", err))
		return
	}
	b.metrics.tasks.WithLabelValues(job.Operation, ph.name, outcome).Inc()
	b.metrics.taskDuration.WithLabelValues(job.Operation, ph.name).Observe(b.clock.Since(start).Seconds())
	if outcome != outcomeSuccess {
		log.LogAttrs(ctx, slog.LevelInfo, "batch: task failed",
			slog.String("operation", job.Operation), slog.String("phase", ph.name), slog.Int64("timer_id", claimed.TimerID),
			slog.String("status", rel.Status), slog.Int("retry", rel.Retry), slog.String("error", rel.Error))
	}
}

// call runs the handler; a panic becomes a permanent failure.
func (b *Batch) call(ctx context.Context, h Handler, ph phase, w *Work) (err error) {
	defer func() {
		if v := recover(); v != nil {
			b.log.Error("batch: handler panicked", slog.String("operation", h.Operation()),
				slog.Int64("task_id", w.Task.ID), slog.Any("panic", v), slog.String("stack", string(debug.Stack())))
			err = Permanent(fmt.Errorf("handler panicked: %v", v))
		}
	}()
	if ph.name == rollback.name {
		return h.Undo(ctx, w)
	}
	return h.Do(ctx, w)
}

// maxCachedJobs bounds the cache of batches' immutable fields.
const maxCachedJobs = 1024

// job returns a task's batch, cached: workers need only its immutable fields (operation,
// parameters, creation time).
func (b *Batch) job(ctx context.Context, id int64) (dao.BatchJob, error) {
	b.jobsMu.Lock()
	j, ok := b.jobs[id]
	b.jobsMu.Unlock()
	if ok {
		return j, nil
	}
	j, err := b.store.GetBatch(ctx, id)
	if err != nil {
		return dao.BatchJob{}, err
	}
	b.jobsMu.Lock()
	if len(b.jobs) >= maxCachedJobs {
		clear(b.jobs)
	}
	b.jobs[id] = j
	b.jobsMu.Unlock()
	return j, nil
}

// markDirty notes that a batch's tasks moved, for the next refresh.
func (b *Batch) markDirty(id int64) {
	b.jobsMu.Lock()
	b.dirty[id] = struct{}{}
	b.jobsMu.Unlock()
}

func (b *Batch) takeDirty() []int64 {
	b.jobsMu.Lock()
	defer b.jobsMu.Unlock()
	ids := make([]int64, 0, len(b.dirty))
	for id := range b.dirty {
		ids = append(ids, id)
	}
	clear(b.dirty)
	return ids
}
