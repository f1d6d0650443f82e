package trigger

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/tockd/tock/executor"
	"github.com/tockd/tock/index"
)

// Defaults of Config.
const (
	DefaultGrace = 2 * time.Second
	// DefaultPoll: the full re-read is a safety net (the change counter, read every
	// ChangePoll, finds new stamps); at 5,000 fires/s a slice holds ~40k members and every
	// full read of all slices cost ~8% of the engine's CPU at a 5 s poll.
	DefaultPoll       = 15 * time.Second
	DefaultChangePoll = 100 * time.Millisecond
)

// Reader reads a slice's occurrences and its change counter (index.Index).
type Reader interface {
	Read(ctx context.Context, s index.Slice) (occ []index.Occurrence, bad int, err error)
	Seq(ctx context.Context, s index.Slice) (int64, error)
}

// Submitter runs occurrences (executor.Executor).
type Submitter interface {
	Submit(ctx context.Context, occ executor.Occurrence, done func(executor.Result)) error
}

// Config configures one trigger run.
type Config struct {
	Slice index.Slice
	// Deadline is when the trigger must stop working the slice: before its lock can expire,
	// so that no two instances work one slice at once. Required.
	Deadline time.Time
	// Grace is how long after the slice's end stragglers may still be stamped into it
	// before it can complete. Default 2s.
	Grace time.Duration
	// Poll is how often the whole slice is re-read even though its change counter did not
	// move (a safety net), aligned to the clock. Default 15s.
	Poll time.Duration
	// ChangePoll is how often the slice's change counter is read, aligned to the clock; the
	// slice is re-read at once when it moved, so an occurrence stamped shortly before it is
	// due still fires on time. Default 100ms.
	ChangePoll time.Duration
	// Lead hands each occurrence to the executor this long before its time (the executor
	// claims it at once and calls it at its millisecond: executor.Config.ClaimAhead), so the
	// store's latency is not added to the callback's. 0: at its time.
	Lead time.Duration
	// Renew, when set, renews the lease on the slice about every RenewEvery while the run
	// works it and returns the new deadline (unchanged when the renewal failed), so that a
	// short lease is held for as long as the run is alive and a crashed owner's slice is
	// free again within seconds.
	Renew      func(ctx context.Context, now time.Time) time.Time
	RenewEvery time.Duration
	Clock      clockwork.Clock
	Logger     *slog.Logger
	// Metrics counts the run (NewMetrics, shared by every trigger); nil counts nothing.
	Metrics *Metrics
}

// Summary is what a run did.
type Summary struct {
	// Complete: every occurrence of the slice has a recorded execution (or was skipped
	// because it no longer exists), and a final read after the grace period found no more.
	Complete bool
	// Counts of occurrences by outcome; Pending were submitted and had not come back when
	// the run ended; Retrying failed an attempt and have their next one stored.
	Succeeded, Failed, Skipped, Unrecorded, Pending, Retrying int
}

// Trigger fires the occurrences of one slice.
type Trigger struct {
	cfg  Config
	idx  Reader
	exec Submitter
	clk  clockwork.Clock
	log  *slog.Logger

	// fired holds the state of each occurrence submitted in this run (a struct key: the
	// slice is re-read often, and building string keys cost more than the reads).
	fired map[index.Occurrence]state
	// queue is the slice's occurrences not yet submitted, by scheduled time.
	queue []index.Occurrence
	// retry counts occurrences that came back unrecorded since the last read.
	retry int
	sum   Summary

	mu      sync.Mutex
	results []executor.Result // come back from the executor's goroutines
}

type state uint8

const (
	pending state = iota
	recorded
)

// New returns a trigger for cfg.Slice; it does nothing until Run.
func New(cfg Config, idx Reader, exec Submitter) *Trigger {
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultGrace
	}
	if cfg.Poll <= 0 {
		cfg.Poll = DefaultPoll
	}
	if cfg.ChangePoll <= 0 || cfg.ChangePoll > cfg.Poll {
		cfg.ChangePoll = min(DefaultChangePoll, cfg.Poll)
	}
	if cfg.RenewEvery <= 0 {
		cfg.RenewEvery = time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Trigger{
		cfg:   cfg,
		idx:   idx,
		exec:  exec,
		clk:   cfg.Clock,
		log:   cfg.Logger.With("component", "trigger", "slice", cfg.Slice.String()),
		fired: map[index.Occurrence]state{},
	}
}

// Run works the slice until it is complete, the deadline passes or ctx ends. It wakes at the
// earliest unfired scheduled time (to the millisecond), submits every due occurrence, and
// re-reads the slice when its change counter moves (checked every ChangePoll) or every Poll,
// to find occurrences stamped after it started. Occurrences already due when it starts (a
// late start, a re-run) are submitted at once.
func (t *Trigger) Run(ctx context.Context) Summary {
	// Created at the first wait, so that a fake clock counts the trigger as waiting only
	// while it really waits.
	var timer clockwork.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	completeAfter := t.cfg.Slice.End().Add(t.cfg.Grace)
	var nextRead, nextCheck time.Time // zero: read at once
	seq := int64(-1)                  // change counter as of the last read
	failing := false                  // reading fails: logged once, not every poll
	nextRenew := t.clk.Now().Truncate(t.cfg.RenewEvery).Add(t.cfg.RenewEvery)
	for {
		now := t.clk.Now()
		if t.cfg.Renew != nil && !now.Before(nextRenew) {
			t.cfg.Deadline = t.cfg.Renew(ctx, now)
			nextRenew = now.Truncate(t.cfg.RenewEvery).Add(t.cfg.RenewEvery)
		}
		if !now.Before(t.cfg.Deadline) {
			return t.end(false, "deadline passed")
		}
		if t.collect() > 0 {
			// Occurrences came back unrecorded: the next read, within a second, queues them
			// again (if they are still in the slice).
			nextRead = minTime(nextRead, now.Truncate(time.Second).Add(time.Second))
		}

		// Every ChangePoll read the slice's change counter and re-read the slice when it
		// moved; every Poll re-read it anyway. The counter is read before the slice, so a
		// change in between is seen next time. synced: the queue reflects the slice now.
		synced := false
		if full := !now.Before(nextRead); full || !now.Before(nextCheck) {
			nextCheck = now.Truncate(t.cfg.ChangePoll).Add(t.cfg.ChangePoll)
			if full {
				nextRead = now.Truncate(t.cfg.Poll).Add(t.cfg.Poll)
			}
			s, err := t.idx.Seq(ctx, t.cfg.Slice)
			if err == nil && (full || s != seq) {
				if err = t.read(ctx); err == nil {
					seq = s
				}
			}
			synced = err == nil
			if err != nil {
				if ctx.Err() != nil {
					return t.end(false, "stopped")
				}
				if !failing {
					t.log.Warn("read slice; retrying", "err", err)
				}
			}
			failing = err != nil
		}

		blocked, err := t.fireDue(ctx, now)
		if err != nil {
			return t.end(false, "stopped")
		}

		// Complete once past the grace period, with the slice unchanged since it was last
		// read, nothing left to fire, and every fired occurrence back and recorded.
		if synced && !now.Before(completeAfter) && t.sum.Pending == 0 && t.retry == 0 && len(t.queue) == 0 {
			return t.end(true, "")
		}

		wake := minTime(minTime(nextRead, nextCheck), t.cfg.Deadline)
		if t.cfg.Renew != nil {
			wake = minTime(wake, nextRenew)
		}
		if len(t.queue) > 0 && !blocked {
			wake = minTime(wake, t.queue[0].Due().Add(-t.cfg.Lead))
		}
		if now.Before(completeAfter) {
			wake = minTime(wake, completeAfter)
		}
		if timer == nil {
			timer = t.clk.NewTimer(wake.Sub(now))
		} else {
			timer.Reset(wake.Sub(now))
		}
		select {
		case <-ctx.Done():
			return t.end(false, "stopped")
		case <-timer.Chan():
		}
	}
}

// read replaces the queue with the slice's occurrences not yet fired (including those that
// came back unrecorded).
func (t *Trigger) read(ctx context.Context) error {
	occ, bad, err := t.idx.Read(ctx, t.cfg.Slice)
	if err != nil {
		return err
	}
	if bad > 0 {
		t.log.Warn("slice has members that are not occurrence keys", "count", bad)
	}
	t.queue = t.queue[:0]
	for _, o := range occ {
		if _, done := t.fired[o]; !done {
			t.queue = append(t.queue, o)
		}
	}
	t.retry = 0
	return nil
}

// fireDue submits the queued occurrences scheduled at or before now + Lead. Without a lead a
// scheduled time counts as due only once now has reached its millisecond; with one the
// executor waits for that millisecond before calling. Either way nothing fires early. blocked: the
// executor refused one (it stays queued until the next read); err: the run must end.
func (t *Trigger) fireDue(ctx context.Context, now time.Time) (blocked bool, err error) {
	nowMS := now.Add(t.cfg.Lead).UnixMilli()
	for len(t.queue) > 0 && t.queue[0].ScheduledMS <= nowMS {
		o := t.queue[0]
		occ := executor.Occurrence{TimerID: o.TimerID, ScheduledMS: o.ScheduledMS}
		if err := t.exec.Submit(ctx, occ, t.done); err != nil {
			if ctx.Err() != nil || errors.Is(err, executor.ErrStopped) {
				return false, err
			}
			t.log.Warn("submit occurrence", "key", occ.Key(), "err", err)
			t.cfg.Metrics.refused()
			return true, nil
		}
		t.queue = t.queue[1:]
		t.fired[o] = pending
		t.sum.Pending++
		t.cfg.Metrics.submitted()
	}
	return false, nil
}

// done receives a result on the executor's goroutine. It never blocks: results are picked
// up at the trigger's next wake-up (at most Poll later), which also keeps the trigger's
// wake-ups on the clock alone.
func (t *Trigger) done(r executor.Result) {
	t.mu.Lock()
	t.results = append(t.results, r)
	t.mu.Unlock()
}

// collect applies the results that came back and returns how many were unrecorded.
func (t *Trigger) collect() (unrecorded int) {
	t.mu.Lock()
	rs := t.results
	t.results = nil
	t.mu.Unlock()
	for _, r := range rs {
		key := index.Occurrence{TimerID: r.TimerID, ScheduledMS: r.ScheduledMS}
		t.sum.Pending--
		switch r.Outcome {
		case executor.Succeeded:
			t.sum.Succeeded++
		case executor.Failed:
			t.sum.Failed++
		case executor.Skipped:
			t.sum.Skipped++
		case executor.Retrying:
			// Settled: the next attempt is stored and the executor's poller runs it.
			t.sum.Retrying++
		default:
			// Not recorded: forget it was fired, so the next read queues it again.
			t.sum.Unrecorded++
			t.retry++
			unrecorded++
			delete(t.fired, key)
			continue
		}
		t.fired[key] = recorded
	}
	return unrecorded
}

func (t *Trigger) end(complete bool, why string) Summary {
	t.collect()
	t.sum.Complete = complete
	t.cfg.Metrics.ran(complete, why)
	if complete {
		t.log.Debug("slice complete", "succeeded", t.sum.Succeeded, "failed", t.sum.Failed, "skipped", t.sum.Skipped)
	} else if why != "stopped" {
		t.log.Warn("slice incomplete: it will be re-run", "why", why, "pending", t.sum.Pending,
			"queued", len(t.queue), "unrecorded", t.sum.Unrecorded)
	}
	return t.sum
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
