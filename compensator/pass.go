package compensator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/tockd/tock/dao"
	"github.com/tockd/tock/executor"
	"github.com/tockd/tock/index"
	"github.com/tockd/tock/schedule"
)

// timerInfo is the little of a timer a pass keeps in memory to recompute its occurrences.
type timerInfo struct {
	id, version int64
	// since: occurrences at or before the timer's last change are not expected (the
	// definition they belong to may not have existed then).
	since   int64
	misfire string
	sched   schedule.Schedule
}

// missing is an occurrence that has no execution.
type missing struct {
	t  *timerInfo
	ms int64
}

// pass does the work of one pass into rep:
//
//  1. stuck executions (pending/running unchanged for StuckAfter) are re-driven;
//  2. the settled slices of the catch-up window NOT recorded in slice_done are listed; only
//     when there are some are the enabled timers read (once), and for each such slice the
//     occurrences its bucket's timers should have had are recomputed and compared with the
//     execution rows of the slice's time range; the missing ones are handled per misfire
//     policy, newest first, and the slice is recorded done once all are settled;
//  3. at start-up (catch-up) the undone slices older than the window, back to the last
//     completed slice, are handled the same way except that every missing occurrence is
//     recorded missed.
func (c *Compensator) pass(ctx context.Context, now time.Time, rep *Report) error {
	budget := c.cfg.MaxPerPass
	if err := c.redriveStuck(ctx, now, rep, &budget); err != nil {
		return err
	}

	first, last, ok, err := c.store.SliceDoneBounds(ctx)
	if err != nil {
		return err
	}
	if !ok {
		// No slice was ever recorded: there is no history to compare against yet.
		return nil
	}
	windowStart := now.Add(-c.cfg.CatchUpWindow)
	// Slices starting before settledEnd are no longer worked by any trigger.
	settledEnd := index.SliceStart(now.Add(-settle)).Add(index.SliceLen)
	from := index.SliceStart(windowStart)
	if h := time.UnixMilli(first).UTC(); h.After(from) {
		from = h // knowledge starts at the first recorded slice
	}
	if rep.Kind == KindCatchUp {
		// Back to a little before the last completed slice: the buckets of its minute and
		// the one before may not all have completed.
		if lo := time.UnixMilli(last).UTC().Add(-2 * index.SliceLen); lo.Before(from) {
			from = lo
		}
		if h := time.UnixMilli(first).UTC(); from.Before(h) {
			from = h
		}
	}
	undone, doneCount, err := c.undoneSlices(ctx, from, settledEnd)
	if err != nil {
		return err
	}
	rep.SlicesDone = doneCount
	if len(undone) > 0 {
		if err := c.scanSlices(ctx, now, windowStart, undone, rep, &budget); err != nil {
			return err
		}
	}

	if rep.Kind != KindCatchUp {
		// Keep a window's worth of history before the window, so SliceDoneBounds still
		// knows where knowledge starts after a long stop.
		cut := index.SliceStart(windowStart.Add(-c.cfg.CatchUpWindow - time.Hour))
		if _, err := c.store.PruneSlicesDone(ctx, cut.UnixMilli()); err != nil {
			return err
		}
	}
	return nil
}

func (c *Compensator) redriveStuck(ctx context.Context, now time.Time, rep *Report, budget *int) error {
	// Unchanged for StuckAfter or longer.
	stuck, err := c.store.ListStuckExecutions(ctx, now.Add(-c.cfg.StuckAfter).UnixMilli()+1, *budget)
	if err != nil {
		return err
	}
	rep.Stuck = len(stuck)
	if len(stuck) == 0 {
		return nil
	}
	occs := make([]executor.Occurrence, len(stuck))
	for i, e := range stuck {
		occs[i] = executor.Occurrence{TimerID: e.TimerID, ScheduledMS: e.ScheduledMS}
		c.log.Info("re-driving stuck execution", "execution_id", e.ID, "timer_id", e.TimerID,
			"scheduled_ms", e.ScheduledMS, "status", e.Status, "owner", e.Owner, "waiting_ms", now.UnixMilli()-e.UpdatedMS)
	}
	*budget -= len(occs)
	_, err = c.redrive(ctx, occs, rep)
	return err
}

// undoneSlices lists the slices starting in [from, to) that slice_done does not hold, newest
// first, and how many of the range it does hold.
func (c *Compensator) undoneSlices(ctx context.Context, from, to time.Time) ([]index.Slice, int, error) {
	if !from.Before(to) {
		return nil, 0, nil
	}
	done, err := c.store.ListSlicesDone(ctx, from.UnixMilli(), to.UnixMilli())
	if err != nil {
		return nil, 0, err
	}
	type key struct {
		ms int64
		b  int
	}
	have := make(map[key]bool, len(done))
	for _, d := range done {
		have[key{d.SliceStartMS, d.Bucket}] = true
	}
	var out []index.Slice
	for m := to.Add(-index.SliceLen); !m.Before(from); m = m.Add(-index.SliceLen) {
		for b := range c.keys.Buckets() {
			if !have[key{m.UnixMilli(), b}] {
				out = append(out, index.Slice{Start: m, Bucket: b})
			}
		}
	}
	return out, len(done), nil
}

// loadTimers reads every enabled timer once and groups them by bucket.
func (c *Compensator) loadTimers(ctx context.Context) (map[int][]*timerInfo, error) {
	out := map[int][]*timerInfo{}
	var after int64
	for {
		page, err := c.store.ListEnabledTimers(ctx, after, timerPage)
		if err != nil {
			return nil, err
		}
		for _, t := range page {
			sched, err := schedule.Parse(schedule.Spec(t.Schedule), time.UnixMilli(t.AnchorMS))
			if err != nil {
				c.log.Warn("stored schedule does not parse; not compensated", "timer_id", t.ID, "err", err)
				continue
			}
			b := c.keys.Bucket(t.ID)
			out[b] = append(out[b], &timerInfo{id: t.ID, version: t.Version, since: t.UpdatedMS,
				misfire: dao.MisfireOrDefault(t.Misfire), sched: sched})
		}
		if len(page) < timerPage {
			return out, nil
		}
		after = page[len(page)-1].ID
	}
}

// scanSlices recomputes and settles the undone slices (newest first) within the budget.
func (c *Compensator) scanSlices(ctx context.Context, now, windowStart time.Time, undone []index.Slice, rep *Report, budget *int) error {
	timers, err := c.loadTimers(ctx)
	if err != nil {
		return err
	}
	for i, sl := range undone {
		if *budget <= 0 {
			rep.Deferred += len(undone) - i // counted per slice: the loop stays fast
			return nil
		}
		miss, cut, err := c.missingIn(ctx, sl, timers[sl.Bucket], *budget)
		if err != nil {
			return err
		}
		rep.SlicesScanned++
		rep.Missing += len(miss)
		if len(miss) > *budget {
			cut = true
			rep.Deferred += len(miss) - *budget
			miss = miss[:*budget]
		}
		*budget -= len(miss)
		settled, err := c.settle(ctx, now, windowStart, miss, rep)
		if err != nil {
			return err
		}
		if settled && !cut {
			// Every occurrence of the slice now has a row: never scan it again.
			if err := c.store.MarkSliceDone(ctx, dao.SliceDone{SliceStartMS: sl.Start.UnixMilli(), Bucket: sl.Bucket,
				CompletedMS: c.clk.Now().UnixMilli(), Instance: c.cfg.InstanceID}); err != nil {
				return err
			}
		}
	}
	return nil
}

// missingIn recomputes the slice's expected occurrences, chunk by chunk of timers (memory
// stays bounded however many timers share the bucket), and returns those with no execution
// row, newest first. It stops once more than limit are missing; cut says so.
func (c *Compensator) missingIn(ctx context.Context, sl index.Slice, timers []*timerInfo, limit int) (out []missing, cut bool, err error) {
	from, to := sl.Start, sl.End()
	for len(timers) > 0 && len(out) <= limit {
		chunk := timers[:min(len(timers), timerPage)]
		timers = timers[len(chunk):]
		var (
			expected []missing
			ids      []int64
		)
		for _, t := range chunk {
			lo := from
			if s := time.UnixMilli(t.since + 1); s.After(lo) {
				lo = s
			}
			if !lo.Before(to) {
				continue
			}
			// A slice holds at most one occurrence per millisecond.
			occ := schedule.Occurrences(t.sched, lo, to, int(index.SliceLen/time.Millisecond))
			if len(occ) > 0 {
				ids = append(ids, t.id)
			}
			for _, o := range occ {
				expected = append(expected, missing{t: t, ms: o.UnixMilli()})
			}
		}
		if len(expected) == 0 {
			continue
		}
		rows, err := c.store.ExistingOccurrences(ctx, ids, from.UnixMilli(), to.UnixMilli())
		if err != nil {
			return nil, false, err
		}
		have := make(map[dao.Occurrence]bool, len(rows))
		for _, r := range rows {
			have[r] = true
		}
		for _, m := range expected {
			if !have[dao.Occurrence{TimerID: m.t.id, ScheduledMS: m.ms}] {
				out = append(out, m)
			}
		}
	}
	cut = len(timers) > 0
	slices.SortFunc(out, func(a, b missing) int {
		if a.ms != b.ms {
			return cmp.Compare(b.ms, a.ms)
		}
		return cmp.Compare(a.t.id, b.t.id)
	})
	return out, cut, nil
}

// settle applies the misfire policy to missing occurrences (newest first) and reports
// whether every one of them now has a row.
func (c *Compensator) settle(ctx context.Context, now, windowStart time.Time, miss []missing, rep *Report) (bool, error) {
	var fire []executor.Occurrence
	settled := true
	for _, m := range miss {
		reason := ""
		switch {
		case m.ms < windowStart.UnixMilli():
			reason = "missed: older than the catch-up window"
		case m.t.misfire == dao.MisfireSkip:
			reason = "missed: misfire policy skip"
		case m.t.misfire == dao.MisfireFireOnce:
			if latest, ok := c.firedOnce[m.t.id]; ok && m.ms <= latest {
				reason = "missed: misfire policy fire_once fired a later occurrence"
			} else {
				c.firedOnce[m.t.id] = m.ms
			}
		}
		if reason == "" {
			fire = append(fire, executor.Occurrence{TimerID: m.t.id, ScheduledMS: m.ms})
			continue
		}
		if _, err := c.store.RecordMissed(ctx, dao.MissedParams{TimerID: m.t.id, ScheduledMS: m.ms, TimerVersion: m.t.version,
			Owner: c.cfg.InstanceID, Reason: reason, NowMS: now.UnixMilli()}); err != nil {
			return false, err
		}
		rep.Missed++
		c.m.missed.Inc()
	}
	c.pruneFiredOnce(windowStart)
	if len(fire) == 0 {
		return settled, nil
	}
	allRecorded, err := c.redrive(ctx, fire, rep)
	return allRecorded, err
}

func (c *Compensator) pruneFiredOnce(windowStart time.Time) {
	for id, ms := range c.firedOnce {
		if ms < windowStart.UnixMilli() {
			delete(c.firedOnce, id)
		}
	}
}

// redrive hands occs to the executor at most Rate per second and waits for their results.
// allRecorded is false when any of them may still lack a row.
func (c *Compensator) redrive(ctx context.Context, occs []executor.Occurrence, rep *Report) (allRecorded bool, err error) {
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	allRecorded = true
	defer wg.Wait()
	for _, occ := range occs {
		if err := c.wait(ctx); err != nil {
			return false, err
		}
		wg.Add(1)
		err := c.exec.Submit(ctx, occ, func(r executor.Result) {
			defer wg.Done()
			mu.Lock()
			defer mu.Unlock()
			switch r.Outcome {
			case executor.Succeeded:
				rep.Succeeded++
			case executor.Failed:
				rep.Failed++
			case executor.Skipped:
				rep.Skipped++
			default:
				rep.Unrecorded++
				allRecorded = false
			}
		})
		if err != nil {
			wg.Done()
			return false, fmt.Errorf("re-drive %s: %w", occ.Key(), err)
		}
		mu.Lock()
		rep.Redriven++
		c.m.compensations.Inc()
		mu.Unlock()
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	return allRecorded, nil
}

// wait takes one token of the rate limiter, sleeping on the injected clock.
func (c *Compensator) wait(ctx context.Context) error {
	r := c.lim.ReserveN(c.clk.Now(), 1)
	if !r.OK() {
		return errors.New("rate limiter refused a token")
	}
	d := r.DelayFrom(c.clk.Now())
	if d <= 0 {
		return ctx.Err()
	}
	t := c.clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		r.Cancel()
		return ctx.Err()
	case <-t.Chan():
		return nil
	}
}
