package batch

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/tockd/tock/dao"
)

// scanLoop runs a scan at start and every ScanInterval, and refreshes the batches workers
// touched every RefreshInterval.
func (b *Batch) scanLoop(ctx context.Context) {
	defer b.loops.Done()
	scan := b.clock.NewTicker(b.cfg.ScanInterval)
	defer scan.Stop()
	refresh := b.clock.NewTicker(b.cfg.RefreshInterval)
	defer refresh.Stop()
	b.scanLogged(ctx, b.clock.Now())
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.quit:
			return
		case now := <-scan.Chan():
			b.scanLogged(ctx, now)
		case <-refresh.Chan():
			b.RefreshTouched(ctx)
		}
	}
}

func (b *Batch) scanLogged(ctx context.Context, now time.Time) {
	if err := b.Scan(ctx, now); err != nil && ctx.Err() == nil {
		b.log.Warn("batch: scan", slog.Any("error", err))
	}
}

// Scan is one maintenance pass at now: it takes back running tasks past their deadline
// (their runner died or overran; each goes back to pending with one more retry, or fails when
// out of retries), aggregates the status of every unfinished batch, restarts the dispatcher
// if the queue has stopped draining, and wakes the dispatcher, which re-queues whatever is
// pending (after a restart, or a dispatch lost with a full queue).
func (b *Batch) Scan(ctx context.Context, now time.Time) error {
	var errs []error
	n, err := b.takeBack(ctx, dao.TakeBackParams{NowMS: now.UnixMilli()})
	if err != nil {
		errs = append(errs, err)
	}
	if n > 0 {
		b.log.Warn("batch: took back tasks whose runner died or overran their deadline", slog.Int("tasks", n))
	}
	jobs, err := b.store.ListUnfinishedBatches(ctx, maxBatchesPerPass)
	if err != nil {
		errs = append(errs, err)
	}
	for _, j := range jobs {
		if _, _, err := b.refresh(ctx, j.ID); err != nil {
			errs = append(errs, err)
		}
	}
	b.checkStalled()
	b.rewind()
	b.wakeDispatcher()
	return errors.Join(errs...)
}

// takeBack takes back, in every unfinished batch (running tasks exist nowhere else), the
// running tasks p selects: those of p.Owner, or those past their deadline at p.NowMS.
func (b *Batch) takeBack(ctx context.Context, p dao.TakeBackParams) (int, error) {
	jobs, err := b.store.ListUnfinishedBatches(ctx, maxBatchesPerPass)
	if err != nil {
		return 0, err
	}
	p.MaxRetries, p.Limit = b.cfg.MaxRetries, b.cfg.QueueSize
	total := 0
	var errs []error
	for _, j := range jobs {
		p.BatchID = j.ID
		n, err := b.store.TakeBackBatchTasks(ctx, p)
		total += n
		if err != nil {
			errs = append(errs, err)
		}
		if n > 0 {
			b.markDirty(j.ID)
		}
	}
	b.metrics.takenBack.Add(float64(total))
	return total, errors.Join(errs...)
}

// RefreshTouched aggregates the status of the batches whose tasks moved here since the last
// call.
func (b *Batch) RefreshTouched(ctx context.Context) {
	for _, id := range b.takeDirty() {
		if _, _, err := b.refresh(ctx, id); err != nil && ctx.Err() == nil {
			b.log.Warn("batch: refresh status", slog.Int64("batch_id", id), slog.Any("error", err))
		}
	}
}

// checkStalled restarts the dispatcher and worker pool when the queue held tasks and no
// worker took one across StalledScans scans in a row: every worker is stuck in a handler that
// ignores its timeout. The seed counted scans in which the queue grew, which a long healthy
// batch also does, and its restart closed the workers without starting new ones.
func (b *Batch) checkStalled() {
	p := b.currentPool()
	if p == nil {
		return
	}
	b.scanMu.Lock()
	taken := p.taken.Load()
	if p.q.len() > 0 && taken == b.lastTaken {
		b.stalled++
	} else {
		b.stalled = 0
	}
	b.lastTaken = taken
	restart := b.stalled >= b.cfg.StalledScans
	if restart {
		b.stalled, b.lastTaken = 0, 0
	}
	b.scanMu.Unlock()
	if restart {
		b.restartPool(p)
	}
}

// restartPool replaces a stalled generation: its handlers are canceled, its workers end
// after their current task, its queued refs are dropped (they are pending in the store and
// the next dispatch queues them again) and a fresh queue and Config.Workers workers start.
func (b *Batch) restartPool(old *pool) {
	b.mu.Lock()
	select {
	case <-b.quit:
		b.mu.Unlock()
		return // stopping: no new workers
	default:
	}
	if b.pool != old {
		b.mu.Unlock()
		return
	}
	b.pool = b.startPool()
	b.mu.Unlock()
	old.stop()
	old.cancel()
	b.metrics.restarts.Inc()
	b.metrics.observeQueue(b.currentPool().q)
	b.log.Warn("batch: dispatcher restarted: the queue did not drain",
		slog.Int("queue_length", old.q.len()), slog.Int64("busy_workers", old.busy.Load()),
		slog.Int("stalled_scans", b.cfg.StalledScans))
}
