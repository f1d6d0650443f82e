package migrator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/tockd/tock/dao"
	"github.com/tockd/tock/index"
	"github.com/tockd/tock/schedule"
)

// Defaults of Config.
const (
	DefaultStep       = time.Minute
	DefaultWindow     = 2 * time.Hour
	DefaultCheckEvery = 10 * time.Second
	DefaultPageSize   = 500
)

// lockTTL bounds how long a crashed stamping pass blocks the next one; a live pass extends
// it after every page.
const lockTTL = 2 * time.Minute

// flushAt is how many entries are buffered before they are sent (in pipelines of
// index.BatchSize), so memory stays bounded however many timers there are (about 3 MB).
// Large enough that, sorted by slice, a pipeline touches few slices: a full pass spreads
// its entries over Window/SliceLen x buckets slices, and each slice a pipeline touches costs
// four commands (ZADD, PEXPIRE, INCR and PEXPIRE of the change counter).
const flushAt = 64 * index.BatchSize

// Store is what the migrator needs from dao.Store.
type Store interface {
	ListEnabledTimers(ctx context.Context, afterID int64, limit int) ([]dao.Timer, error)
}

// Config configures a Migrator. Zero fields take the defaults.
type Config struct {
	// Step is how often the window moves, aligned to the clock (multiples of Step since the
	// Unix epoch); each step stamps only the Step of time newly entering the window. Default
	// 1m: small passes, no hourly burst competing with firing.
	Step time.Duration
	// Window is how far past the next step boundary occurrences are stamped; at least Step.
	// Default 2h.
	Window time.Duration
	// CheckEvery is how often the window marker is checked, so an emptied Redis is rebuilt
	// within that time. Default 10s.
	CheckEvery time.Duration
	// PageSize is the number of timers read from the store per query. Default 500.
	PageSize int
	Clock    clockwork.Clock
	Logger   *slog.Logger

	// Registerer takes the migrator's metrics (the app's /metrics registry). Default: a
	// private registry.
	Registerer prometheus.Registerer
}

// Migrator stamps upcoming occurrences from the store into the index.
type Migrator struct {
	cfg   Config
	store Store
	idx   *index.Index
	rdb   redis.UniversalClient
	keys  index.Keys
	clk   clockwork.Clock
	log   *slog.Logger
	met   *metrics

	// failed counts TimerChanged calls that could not write to Redis; repaired is the count
	// a later full pass has covered. While failed > repaired the next pass re-stamps the
	// whole window whatever the marker says.
	failed, repaired atomic.Int64

	mu      sync.Mutex
	started bool
	stopped bool
	cancel  context.CancelFunc
	done    chan struct{}
}

// New returns a migrator; nothing runs until Start.
func New(cfg Config, store Store, idx *index.Index) (*Migrator, error) {
	if cfg.Step <= 0 {
		cfg.Step = DefaultStep
	}
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.Step < index.SliceLen || cfg.Window < cfg.Step {
		return nil, fmt.Errorf("migrator: step %s must be at least %s and window %s at least the step", cfg.Step, index.SliceLen, cfg.Window)
	}
	if cfg.CheckEvery <= 0 {
		cfg.CheckEvery = DefaultCheckEvery
	}
	if cfg.PageSize <= 0 {
		cfg.PageSize = DefaultPageSize
	}
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	met, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	return &Migrator{
		met:   met,
		cfg:   cfg,
		store: store,
		idx:   idx,
		rdb:   idx.Client(),
		keys:  idx.Keys(),
		clk:   cfg.Clock,
		log:   cfg.Logger.With("component", "migrator"),
	}, nil
}

// Start runs a first pass at once (in the background), then checks every CheckEvery and at
// each step boundary. It returns at once; the loop runs until Stop.
func (m *Migrator) Start(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.started {
		return errors.New("migrator: already started")
	}
	m.started = true
	ctx, m.cancel = context.WithCancel(context.WithoutCancel(ctx))
	m.done = make(chan struct{})
	go m.loop(ctx)
	return nil
}

// Stop ends the loop and waits for it. Idempotent.
func (m *Migrator) Stop() {
	m.mu.Lock()
	if !m.started || m.stopped {
		m.stopped = true
		m.mu.Unlock()
		return
	}
	m.stopped = true
	m.cancel()
	m.mu.Unlock()
	<-m.done
}

func (m *Migrator) loop(ctx context.Context) {
	defer close(m.done)
	var timer clockwork.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		now := m.clk.Now()
		if err := m.RunOnce(ctx, now); err != nil && ctx.Err() == nil {
			m.log.Warn("stamping pass failed; retrying at the next check", "err", err)
		}
		now = m.clk.Now()
		next := now.Truncate(m.cfg.CheckEvery).Add(m.cfg.CheckEvery)
		if b := m.stepStart(now).Add(m.cfg.Step); b.Before(next) {
			next = b
		}
		if timer == nil {
			timer = m.clk.NewTimer(next.Sub(now))
		} else {
			timer.Reset(next.Sub(now))
		}
		select {
		case <-ctx.Done():
			return
		case <-timer.Chan():
		}
	}
}

func (m *Migrator) stepStart(t time.Time) time.Time { return t.UTC().Truncate(m.cfg.Step) }

// Horizon is the end of what is stamped while now is in its step: the next step boundary
// plus the window.
func (m *Migrator) Horizon(now time.Time) time.Time {
	return m.stepStart(now).Add(m.cfg.Step + m.cfg.Window)
}

// RunOnce stamps the current step's window unless its marker says it is done. The step's
// lock lets one instance do it. Markers of earlier steps (and of this one, when another
// instance has just finished it) tell how far the window is stamped already, so only the
// new part is stamped: one Step at each boundary, or the gap after skipped steps. When no
// marker is left (first start, Redis emptied or restarted) it stamps from the current
// minute, as it does after a failed TimerChanged whatever the markers say.
func (m *Migrator) RunOnce(ctx context.Context, now time.Time) error {
	step := m.stepStart(now)
	marker := m.keys.MigrateMarker(step)
	n, err := m.rdb.Exists(ctx, marker).Result()
	if err != nil {
		return fmt.Errorf("migrator: check window marker: %w", err)
	}
	failed := m.failed.Load()
	dirty := failed > m.repaired.Load()
	if n == 1 && !dirty {
		return nil
	}
	lock, ok, err := index.TryLock(ctx, m.rdb, m.keys.MigrateLock(step), lockTTL, now)
	if err != nil || !ok {
		return err // !ok: another instance is stamping this step
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_, _ = lock.Release(rctx)
	}()

	from, to := index.SliceStart(now), m.Horizon(now)
	covered, err := m.covered(ctx, step)
	if err != nil {
		return err
	}
	rebuild := covered.IsZero() || dirty
	horizon := to
	if !rebuild {
		from = maxTime(from, covered)
		horizon = maxTime(to, covered) // a marker set under a longer window vouches for more
	}
	timers, stamped := 0, 0
	if from.Before(to) {
		if timers, stamped, err = m.stampAll(ctx, from, to, now, lock); err != nil {
			return err
		}
	}
	// The marker holds the horizon it vouches for (unix ms) and lives as long as that.
	if err := m.rdb.Set(ctx, marker, horizon.UnixMilli(), horizon.Sub(now)).Err(); err != nil {
		return fmt.Errorf("migrator: set window marker: %w", err)
	}
	// Failures after the pass began may have been missed by it: only those before count.
	m.repaired.Store(failed)
	lvl := slog.LevelDebug // a minute's routine pass
	if rebuild {
		lvl = slog.LevelInfo
	}
	m.log.Log(ctx, lvl, "stamped window", "from", from, "to", to, "rebuild", rebuild, "timers", timers, "occurrences", stamped)
	return nil
}

// covered is the horizon up to which the window is stamped according to the markers still
// in Redis (those of step and of the steps before it), zero when there is none. A marker
// lives until its horizon, at most Step + Window after its step, so older steps need no look.
// Markers written before they held their horizon hold the time they were set: read as a
// horizon, that only makes this pass stamp more.
func (m *Migrator) covered(ctx context.Context, step time.Time) (time.Time, error) {
	n := int((m.cfg.Step+m.cfg.Window+m.cfg.Step-1)/m.cfg.Step) + 1
	keys := make([]string, n)
	for i := range keys {
		keys[i] = m.keys.MigrateMarker(step.Add(-time.Duration(i) * m.cfg.Step))
	}
	// One slot ({migrate} hash tag): a single MGET, on a Cluster too.
	vals, err := m.rdb.MGet(ctx, keys...).Result()
	if err != nil {
		return time.Time{}, fmt.Errorf("migrator: read window markers: %w", err)
	}
	var best time.Time
	for _, v := range vals {
		s, ok := v.(string)
		if !ok {
			continue // missing
		}
		ms, err := strconv.ParseInt(s, 10, 64)
		if err != nil || ms <= 0 {
			continue
		}
		best = maxTime(best, time.UnixMilli(ms).UTC())
	}
	return best, nil
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// stampAll pages through the enabled timers and stamps their occurrences in [from, to).
func (m *Migrator) stampAll(ctx context.Context, from, to, now time.Time, lock *index.Lock) (timers, stamped int, err error) {
	var buf []index.Entry
	flush := func() error {
		if len(buf) == 0 {
			return nil
		}
		slices.SortFunc(buf, func(a, b index.Entry) int {
			if c := a.Slice.Start.Compare(b.Slice.Start); c != 0 {
				return c
			}
			return cmp.Compare(a.Slice.Bucket, b.Slice.Bucket)
		})
		if err := m.idx.Add(ctx, buf, now); err != nil {
			return err
		}
		stamped += len(buf)
		m.met.stamp(sourceWindow, len(buf))
		buf = buf[:0]
		return nil
	}
	var after int64
	for {
		page, err := m.store.ListEnabledTimers(ctx, after, m.cfg.PageSize)
		if err != nil {
			m.met.storeError(err)
			return timers, stamped, fmt.Errorf("migrator: list enabled timers after %d: %w", after, err)
		}
		for _, t := range page {
			es, err := m.Entries(t, from, to, now)
			if err != nil {
				m.log.Error("timer's stored schedule does not parse; not stamped", "timer_id", t.ID, "err", err)
				continue
			}
			buf = append(buf, es...)
			if len(buf) >= flushAt {
				if err := flush(); err != nil {
					return timers, stamped, err
				}
			}
		}
		timers += len(page)
		if len(page) < m.cfg.PageSize {
			break
		}
		after = page[len(page)-1].ID
		if _, err := lock.Extend(ctx, lockTTL, m.clk.Now()); err != nil {
			m.log.Warn("extend migrator lock", "err", err)
		}
	}
	return timers, stamped, flush()
}

// Entries are the index entries of t's occurrences in [from, to), leaving out those before
// the timer's last change (t.UpdatedMS). A one-shot already past (and still enabled, so not
// executed yet) goes into the current minute's slice with its own scheduled time, so it
// fires at once.
func (m *Migrator) Entries(t dao.Timer, from, to, now time.Time) ([]index.Entry, error) {
	sched, err := schedule.Parse(schedule.Spec(t.Schedule), time.UnixMilli(t.AnchorMS))
	if err != nil {
		return nil, err
	}
	bucket := m.keys.Bucket(t.ID)
	if sched.Kind() == schedule.KindAt {
		at := sched.Next(time.Time{})
		cur := index.SliceStart(now)
		switch {
		case at.Before(cur):
			return []index.Entry{{Slice: index.Slice{Start: cur, Bucket: bucket}, TimerID: t.ID, ScheduledMS: at.UnixMilli()}}, nil
		case !at.Before(from) && at.Before(to):
			return []index.Entry{{Slice: index.SliceAt(at, bucket), TimerID: t.ID, ScheduledMS: at.UnixMilli()}}, nil
		}
		return nil, nil
	}
	// Nothing before the timer's last change: a timer created or enabled in this minute
	// must not fire the minute's earlier occurrences. (A past one-shot above is different:
	// it is meant to fire at once.)
	if changed := time.UnixMilli(t.UpdatedMS); changed.After(from) {
		from = changed
	}
	if !from.Before(to) {
		return nil, nil
	}
	limit := int(to.Sub(from)/schedule.MinEvery) + 1
	occ := schedule.Occurrences(sched, from, to, limit)
	es := make([]index.Entry, len(occ))
	for i, o := range occ {
		es[i] = index.Entry{Slice: index.SliceAt(o, bucket), TimerID: t.ID, ScheduledMS: o.UnixMilli()}
	}
	return es, nil
}

// TimerChanged updates the index after a timer was created, changed, enabled, disabled or
// deleted (before is nil on create; after.Status is deleted on delete). An enabled timer's
// window is stamped at once. When the schedule changed or the timer is no longer enabled,
// the old definition's stamped occurrences are removed. Removal is best effort: the
// executor checks every occurrence against the stored timer, which is the guarantee that an
// old definition never fires.
func (m *Migrator) TimerChanged(ctx context.Context, before *dao.Timer, after dao.Timer) error {
	now := m.clk.Now()
	from, to := index.SliceStart(now), m.Horizon(now)
	if after.UpdatedMS == 0 {
		after.UpdatedMS = now.UnixMilli() // the change is now, for Entries' lower bound
	}
	var remove, add []index.Entry
	if after.Status == dao.StatusEnabled {
		es, err := m.Entries(after, from, to, now)
		if err != nil {
			return fmt.Errorf("migrator: timer %d: %w", after.ID, err)
		}
		add = es
	}
	if before != nil && before.Status == dao.StatusEnabled &&
		(after.Status != dao.StatusEnabled || before.Schedule != after.Schedule || before.AnchorMS != after.AnchorMS) {
		es, err := m.Entries(*before, from, to, now)
		if err != nil {
			m.log.Warn("previous schedule does not parse; nothing to remove", "timer_id", before.ID, "err", err)
		} else {
			remove = es
		}
	}
	if err := m.idx.Update(ctx, remove, add, now); err != nil {
		m.failed.Add(1)
		return fmt.Errorf("migrator: timer %d changed (the next pass re-stamps the window): %w", after.ID, err)
	}
	m.met.stamp(sourceChange, len(add))
	return nil
}
