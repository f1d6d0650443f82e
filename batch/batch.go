package batch

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tockd/tock/dao"
)

// Store is the part of *dao.Store the batch runner and its handlers use.
type Store interface {
	CreateBatch(ctx context.Context, j dao.BatchJob, timerIDs []int64, nowMS int64) (dao.BatchJob, bool, error)
	BatchByRequestID(ctx context.Context, requestID string) (dao.BatchJob, error)
	GetBatch(ctx context.Context, id int64) (dao.BatchJob, error)
	ListBatches(ctx context.Context, p dao.ListBatchesParams) ([]dao.BatchJob, error)
	ListUnfinishedBatches(ctx context.Context, limit int) ([]dao.BatchJob, error)
	CountBatchTasks(ctx context.Context, batchID int64) (map[string]int, error)
	BatchTaskTimes(ctx context.Context, batchID int64, statuses ...string) (minStartedMS, maxFinishedMS int64, err error)
	SetBatchStatus(ctx context.Context, p dao.BatchStatusParams) (dao.BatchJob, error)
	CancelBatch(ctx context.Context, id, nowMS int64) (dao.BatchJob, int, error)
	StartBatchRollback(ctx context.Context, id, nowMS int64) (dao.BatchJob, int, error)
	CancelPendingBatchTasks(ctx context.Context, batchID, nowMS int64) (int, error)
	ListBatchTasks(ctx context.Context, p dao.ListBatchTasksParams) ([]dao.BatchTask, error)
	GetBatchTask(ctx context.Context, id int64) (dao.BatchTask, error)
	ClaimBatchTask(ctx context.Context, p dao.ClaimBatchTaskParams) (bool, error)
	JournalBatchTask(ctx context.Context, id, version int64, before, after dao.Timer, nowMS int64) (int64, error)
	ReleaseBatchTask(ctx context.Context, p dao.ReleaseBatchTaskParams) error
	TakeBackBatchTasks(ctx context.Context, p dao.TakeBackParams) (int, error)

	GetTimers(ctx context.Context, ids []int64) (map[int64]dao.Timer, error)
	SelectTimerIDs(ctx context.Context, sel dao.TimerSelector, limit int) ([]int64, error)
	GetTimerAny(ctx context.Context, id int64) (dao.Timer, error)
	RestoreTimer(ctx context.Context, img dao.Timer, expectVersion, nowMS int64) (dao.Timer, error)
}

var _ Store = (*dao.Store)(nil)

// Deps are what a Batch needs. Store and Clock are required.
type Deps struct {
	Store Store
	Clock clockwork.Clock
	// Log defaults to slog.Default().
	Log *slog.Logger
	// Registerer receives the metrics. Default: prometheus.DefaultRegisterer.
	Registerer prometheus.Registerer
	// Instance names this runner in the tasks it claims (conf's instance_id); it must be
	// unique among running instances and stable across a restart, so a restarted instance
	// takes back its previous life's claims at once. Default: a random name.
	Instance string
}

// Batch creates batches and runs their tasks: a dispatcher feeding a bounded queue, a fixed
// pool of workers and a periodic scanner. Create, Get, List, ListTasks, Cancel and Rollback
// work without Start (an API-only instance); Start runs tasks.
type Batch struct {
	cfg      Config
	store    Store
	clock    clockwork.Clock
	log      *slog.Logger
	metrics  *metrics
	instance string
	handlers registry

	wake chan struct{} // wakes the dispatcher; capacity 1, so wakes coalesce

	mu        sync.Mutex
	started   bool
	runCtx    context.Context
	runCancel context.CancelFunc
	pool      *pool
	quit      chan struct{} // closed by Stop: producers end
	loops     sync.WaitGroup
	workers   sync.WaitGroup
	stopOnce  sync.Once

	jobsMu    sync.Mutex
	jobs      map[int64]dao.BatchJob // immutable fields of batches seen by the workers
	positions map[int64]readPos      // where the dispatcher reads each batch's tasks
	dirty     map[int64]struct{}     // batches whose tasks moved since the last refresh

	scanMu    sync.Mutex
	lastTaken int64
	stalled   int
}

// New builds a Batch; nothing runs until Start. Register handlers before Start.
func New(cfg Config, d Deps) (*Batch, error) {
	if d.Store == nil || d.Clock == nil {
		return nil, errors.New("batch: Deps.Store and Deps.Clock are required")
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("batch: config: %w", err)
	}
	if d.Log == nil {
		d.Log = slog.Default()
	}
	if d.Registerer == nil {
		d.Registerer = prometheus.DefaultRegisterer
	}
	if d.Instance == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		d.Instance = "batch-" + hex.EncodeToString(b[:])
	}
	m, err := newMetrics(d.Registerer)
	if err != nil {
		return nil, err
	}
	return &Batch{
		cfg:       cfg,
		store:     d.Store,
		clock:     d.Clock,
		log:       d.Log,
		metrics:   m,
		instance:  d.Instance,
		wake:      make(chan struct{}, 1),
		quit:      make(chan struct{}),
		jobs:      map[int64]dao.BatchJob{},
		positions: map[int64]readPos{},
		dirty:     map[int64]struct{}{},
	}, nil
}

// Register adds a handler; it fails for an empty name, a non-positive timeout or a name
// registered already.
func (b *Batch) Register(h Handler) error { return b.handlers.register(h) }

// Operations lists the registered operations, sorted.
func (b *Batch) Operations() []string { return b.handlers.operations() }

// Instance is the name this runner claims tasks under.
func (b *Batch) Instance() string { return b.instance }

// timeout is a handler's timeout after the configured overrides.
func (b *Batch) timeout(h Handler) time.Duration {
	if d, ok := b.cfg.Timeouts[h.Operation()]; ok {
		return d
	}
	return h.Timeout()
}

// Start takes back the claims this instance held before a restart, then starts the workers,
// the dispatcher and the scanner, and returns. Canceling ctx stops everything abruptly, like
// a crash: handlers are canceled and their claims are left for a take-back. Stop is the
// graceful end.
func (b *Batch) Start(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.started {
		return errors.New("batch: already started")
	}
	select {
	case <-b.quit:
		return errors.New("batch: stopped; build a new Batch")
	default:
	}
	b.started = true
	b.runCtx, b.runCancel = context.WithCancel(ctx)

	// Before any worker claims under this name: every running claim with it is a dead one.
	if n, err := b.takeBack(b.runCtx, dao.TakeBackParams{Owner: b.instance, NowMS: b.clock.Now().UnixMilli()}); err != nil {
		b.log.Warn("batch: take back this instance's earlier claims failed; the scanner will after their deadline",
			slog.String("instance", b.instance), slog.Any("error", err))
	} else if n > 0 {
		b.log.Info("batch: took back claims of this instance's previous run", slog.String("instance", b.instance), slog.Int("tasks", n))
	}

	b.pool = b.startPool()
	b.metrics.observeQueue(b.pool.q)
	b.loops.Add(2)
	go b.dispatchLoop(b.runCtx)
	go b.scanLoop(b.runCtx)
	b.wakeDispatcher()
	return nil
}

// Stop stops the dispatcher and the scanner, lets the workers finish the task each is on
// (each bounded by its handler's timeout), and returns when every goroutine has ended.
// Tasks still queued stay pending in the store for the next scan of any instance. It is
// idempotent, and a no-op before Start.
func (b *Batch) Stop() {
	b.stopOnce.Do(func() {
		close(b.quit) // producers first
		b.loops.Wait()
		b.mu.Lock()
		p := b.pool
		b.mu.Unlock()
		if p != nil {
			p.stop() // then consumers
		}
		b.workers.Wait()
		b.mu.Lock()
		if b.runCancel != nil {
			b.runCancel()
		}
		b.mu.Unlock()
		b.metrics.busyWorkers.Set(0)
		b.metrics.workers.Set(0)
		b.metrics.queueLength.Set(0)
		b.metrics.queueUsage.Set(0)
	})
}

func (b *Batch) wakeDispatcher() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// CreateParams describe a batch to create. Exactly one of IDs and Selector is the target.
type CreateParams struct {
	Operation string
	// IDs lists timers; duplicates are ignored.
	IDs []int64
	// Selector chooses timers when the batch is created.
	Selector *dao.TimerSelector
	// Params are the operation's parameters (JSON), nil when none.
	Params json.RawMessage
	// RequestID makes creation idempotent: the same id with the same request returns the
	// batch created first.
	RequestID string
}

// Create validates p, resolves its target to timer ids and stores the batch with one task
// per timer, then dispatches it at once. existed is true when p.RequestID named a batch
// created earlier with the same request. Errors: ErrUnknownOperation, the handler's
// validation error, ErrEmptyTarget, ErrNoMatch, ErrUnknownTimers, ErrTooManyTargets,
// ErrIdempotency, or a store error.
func (b *Batch) Create(ctx context.Context, p CreateParams) (job dao.BatchJob, existed bool, err error) {
	h, ok := b.handlers.get(p.Operation)
	if !ok {
		return dao.BatchJob{}, false, fmt.Errorf("%w %q; one of %s", ErrUnknownOperation, p.Operation, strings.Join(b.Operations(), ", "))
	}
	now := b.clock.Now()
	params, err := h.Validate(p.Params, now)
	if err != nil {
		return dao.BatchJob{}, false, err
	}
	if (p.Selector == nil) == (p.IDs == nil) {
		return dao.BatchJob{}, false, fmt.Errorf("%w: give either timer ids or a selector", ErrEmptyTarget)
	}
	var ids []int64
	var target any
	if p.Selector == nil {
		ids = slices.Clone(p.IDs)
		slices.Sort(ids)
		ids = slices.Compact(ids)
		target = map[string]int{"ids": len(ids)}
	} else {
		target = selectorJSON{App: p.Selector.App, Status: p.Selector.Status, NamePrefix: p.Selector.NamePrefix}
	}
	tj, _ := json.Marshal(target) // plain values: cannot fail
	job = dao.BatchJob{Operation: p.Operation, Target: string(tj), Params: string(params), RequestID: p.RequestID}
	if p.RequestID != "" {
		// The parameters as sent, not as normalized: a relative time resolves differently
		// on every retry.
		job.RequestHash = requestHash(p.Operation, ids, target, canonicalJSON(p.Params))
		// A replay finds its batch without resolving the target again.
		prev, err := b.store.BatchByRequestID(ctx, p.RequestID)
		if err == nil {
			return b.replay(prev, job)
		}
		if !errors.Is(err, dao.ErrNotFound) {
			return dao.BatchJob{}, false, err
		}
	}

	if p.Selector == nil {
		if err := b.checkIDs(ctx, ids, &job); err != nil {
			return dao.BatchJob{}, false, err
		}
	} else {
		job.App = p.Selector.App
		ids, err = b.store.SelectTimerIDs(ctx, *p.Selector, b.cfg.MaxTargets+1)
		if err != nil {
			return dao.BatchJob{}, false, err
		}
		switch {
		case len(ids) == 0:
			return dao.BatchJob{}, false, fmt.Errorf("%w (app %s%s)", ErrNoMatch, p.Selector.App, describeSelector(*p.Selector))
		case len(ids) > b.cfg.MaxTargets:
			return dao.BatchJob{}, false, fmt.Errorf("%w: the selector matches more than %d timers; narrow it", ErrTooManyTargets, b.cfg.MaxTargets)
		}
	}

	out, existed, err := b.store.CreateBatch(ctx, job, ids, now.UnixMilli())
	if err != nil {
		return dao.BatchJob{}, false, err
	}
	if existed {
		return b.replay(out, job)
	}
	b.metrics.statusChanges.WithLabelValues(out.Status).Inc()
	b.log.Info("batch: created", slog.Int64("batch_id", out.ID), slog.String("operation", out.Operation),
		slog.Int("tasks", out.Total), slog.String("app", out.App))
	b.wakeDispatcher()
	return out, false, nil
}

type selectorJSON struct {
	App        string `json:"app"`
	Status     string `json:"status,omitempty"`
	NamePrefix string `json:"name_prefix,omitempty"`
}

func describeSelector(s dao.TimerSelector) string {
	var b strings.Builder
	if s.Status != "" {
		fmt.Fprintf(&b, ", status %s", s.Status)
	}
	if s.NamePrefix != "" {
		fmt.Fprintf(&b, ", name prefix %q", s.NamePrefix)
	}
	return b.String()
}

// checkIDs refuses an empty or too long list and ids that name no live timer, and sets the
// batch's app when all timers share one.
func (b *Batch) checkIDs(ctx context.Context, ids []int64, job *dao.BatchJob) error {
	switch {
	case len(ids) == 0:
		return fmt.Errorf("%w: the list of timer ids is empty", ErrEmptyTarget)
	case len(ids) > b.cfg.MaxTargets:
		return fmt.Errorf("%w: %d timers, at most %d per batch", ErrTooManyTargets, len(ids), b.cfg.MaxTargets)
	}
	found, err := b.store.GetTimers(ctx, ids)
	if err != nil {
		return err
	}
	var missing []string
	apps := map[string]bool{}
	for _, id := range ids {
		t, ok := found[id]
		if !ok {
			if len(missing) < 10 {
				missing = append(missing, fmt.Sprint(id))
			}
			continue
		}
		apps[t.App] = true
	}
	if n := len(ids) - len(found); n > 0 {
		return fmt.Errorf("%w: %d of the ids name no timer (or a deleted one): %s", ErrUnknownTimers, n, strings.Join(missing, ", "))
	}
	if len(apps) == 1 {
		for app := range apps {
			job.App = app
		}
	}
	return nil
}

// replay answers a create whose request id exists: the stored batch if the request is the
// same, ErrIdempotency otherwise.
func (b *Batch) replay(prev, req dao.BatchJob) (dao.BatchJob, bool, error) {
	if prev.RequestHash != req.RequestHash {
		return dao.BatchJob{}, false, fmt.Errorf("%w (batch %d)", ErrIdempotency, prev.ID)
	}
	return prev, true, nil
}

// requestHash fingerprints a create request: operation, resolved id list or selector, and
// the normalized parameters.
func requestHash(op string, ids []int64, target any, params json.RawMessage) string {
	b, _ := json.Marshal(struct {
		Operation string          `json:"operation"`
		IDs       []int64         `json:"ids,omitempty"`
		Target    any             `json:"target"`
		Params    json.RawMessage `json:"params,omitempty"`
	}{op, ids, target, params})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// canonicalJSON re-marshals raw (sorted keys, no spaces), so formatting does not matter.
func canonicalJSON(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return nil
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return raw
	}
	b, _ := json.Marshal(v) // decoded JSON: cannot fail
	return b
}

// Counts are the tasks of a batch by status, every status present.
type Counts map[string]int

// Get returns a batch with its tasks counted by status, after bringing its aggregated status
// up to date. dao.ErrNotFound when absent.
func (b *Batch) Get(ctx context.Context, id int64) (dao.BatchJob, Counts, error) {
	return b.refresh(ctx, id)
}

// List returns a page of batches.
func (b *Batch) List(ctx context.Context, p dao.ListBatchesParams) ([]dao.BatchJob, error) {
	return b.store.ListBatches(ctx, p)
}

// ListTasks returns a page of a batch's tasks; dao.ErrNotFound when the batch is absent.
func (b *Batch) ListTasks(ctx context.Context, p dao.ListBatchTasksParams) ([]dao.BatchTask, error) {
	if _, err := b.store.GetBatch(ctx, p.BatchID); err != nil {
		return nil, err
	}
	return b.store.ListBatchTasks(ctx, p)
}

// Cancel cancels a pending or running batch: no task starts any more, running tasks finish,
// the others become cancel. ErrFinished for a batch in any other status.
func (b *Batch) Cancel(ctx context.Context, id int64) (dao.BatchJob, Counts, error) {
	j, n, err := b.store.CancelBatch(ctx, id, b.clock.Now().UnixMilli())
	if errors.Is(err, dao.ErrBatchState) {
		return dao.BatchJob{}, nil, fmt.Errorf("%w: batch %d is %s; only a pending or running batch can be canceled", ErrFinished, id, j.Status)
	}
	if err != nil {
		return dao.BatchJob{}, nil, err
	}
	b.metrics.statusChanges.WithLabelValues(dao.BatchCancel).Inc()
	b.log.Info("batch: canceled", slog.Int64("batch_id", id), slog.Int("tasks_canceled", n))
	return b.refresh(ctx, id)
}

// Rollback restores every timer the batch changed from its before-image, in the same way the
// batch ran (queue, workers, retries). It is refused while the batch runs (ErrRunning), after
// a successful rollback (ErrRolledBack) and for irreversible operations (ErrNotReversible).
// A rollback that failed in part may be asked for again: it retries the failed ones.
func (b *Batch) Rollback(ctx context.Context, id int64) (dao.BatchJob, Counts, error) {
	cur, err := b.store.GetBatch(ctx, id)
	if err != nil {
		return dao.BatchJob{}, nil, err
	}
	if h, ok := b.handlers.get(cur.Operation); ok && !h.Reversible() {
		return dao.BatchJob{}, nil, fmt.Errorf("%w: batch %d is a %s batch", ErrNotReversible, id, cur.Operation)
	}
	j, n, err := b.store.StartBatchRollback(ctx, id, b.clock.Now().UnixMilli())
	if errors.Is(err, dao.ErrBatchState) {
		if j.Status == dao.BatchRollbackSuccess {
			return dao.BatchJob{}, nil, fmt.Errorf("%w: batch %d", ErrRolledBack, id)
		}
		return dao.BatchJob{}, nil, fmt.Errorf("%w: batch %d is %s; wait until it has finished (or cancel it first)", ErrRunning, id, j.Status)
	}
	if err != nil {
		return dao.BatchJob{}, nil, err
	}
	b.metrics.statusChanges.WithLabelValues(dao.BatchRollbackRunning).Inc()
	b.log.Info("batch: rollback started", slog.Int64("batch_id", id), slog.Int("tasks", n))
	b.wakeDispatcher()
	return b.refresh(ctx, id)
}

// refresh aggregates a batch's status from its tasks and writes it when it changed
// (compare-and-set on the batch's version; another instance may do the same at once).
func (b *Batch) refresh(ctx context.Context, id int64) (dao.BatchJob, Counts, error) {
	for attempt := 1; ; attempt++ {
		j, err := b.store.GetBatch(ctx, id)
		if err != nil {
			return dao.BatchJob{}, nil, err
		}
		c, err := b.store.CountBatchTasks(ctx, id)
		if err != nil {
			return dao.BatchJob{}, nil, err
		}
		now := b.clock.Now().UnixMilli()
		if j.Status == dao.BatchCancel && c[dao.TaskPending] > 0 {
			// Retried or taken back after the cancel: they must not start.
			if _, err := b.store.CancelPendingBatchTasks(ctx, id, now); err != nil {
				return dao.BatchJob{}, nil, err
			}
			continue
		}
		counts := Counts{}
		for _, s := range dao.TaskStatuses {
			counts[s] = c[s]
		}
		a, err := aggregate(j, counts, func(statuses ...string) (int64, int64, error) {
			return b.store.BatchTaskTimes(ctx, id, statuses...)
		})
		if err != nil {
			return dao.BatchJob{}, nil, err
		}
		if a.status == j.Status && a.startedMS == j.StartedMS && a.finishedMS == j.FinishedMS &&
			a.rollbackFinishedMS == j.RollbackFinishedMS {
			return j, counts, nil
		}
		out, err := b.store.SetBatchStatus(ctx, dao.BatchStatusParams{
			ID: id, ExpectVersion: j.Version, Status: a.status, StartedMS: a.startedMS, FinishedMS: a.finishedMS,
			RollbackFinishedMS: a.rollbackFinishedMS, NowMS: now,
		})
		if errors.Is(err, dao.ErrVersionConflict) && attempt < 5 {
			continue
		}
		if err != nil {
			return dao.BatchJob{}, nil, err
		}
		if out.Status != j.Status {
			b.metrics.statusChanges.WithLabelValues(out.Status).Inc()
			if Finished(out) {
				b.logFinished(ctx, out, counts)
			}
		}
		return out, counts, nil
	}
}

func (b *Batch) logFinished(ctx context.Context, j dao.BatchJob, c Counts) {
	attrs := []slog.Attr{
		slog.Int64("batch_id", j.ID), slog.String("operation", j.Operation), slog.String("status", j.Status),
		slog.Int("tasks", j.Total),
	}
	for _, s := range dao.TaskStatuses {
		if c[s] > 0 {
			attrs = append(attrs, slog.Int(s, c[s]))
		}
	}
	switch {
	case j.RollbackFinishedMS > 0:
		attrs = append(attrs, slog.Int64("rollback_ms", j.RollbackFinishedMS-j.RollbackStartedMS))
	case j.FinishedMS > 0:
		attrs = append(attrs, slog.Int64("duration_ms", j.FinishedMS-j.CreatedMS))
	}
	b.log.LogAttrs(ctx, slog.LevelInfo, "batch: finished", attrs...)
}
