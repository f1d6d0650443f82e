package executor

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tockd/tock/dao"
)

// PollerStore is what the Poller needs from dao.Store.
type PollerStore interface {
	ResetStaleExecutions(ctx context.Context, p dao.ResetStaleParams) ([]dao.Execution, error)
	ClaimDueRetries(ctx context.Context, p dao.ClaimRetriesParams) ([]dao.Execution, error)
	HandBackExecution(ctx context.Context, id int64, owner string, nowMS int64) error
}

// PollerConfig configures a Poller. Zero fields take the defaults named.
type PollerConfig struct {
	// InstanceID owns the executions claimed. Required.
	InstanceID string
	// Interval between passes, aligned to the clock. Default 1s.
	Interval time.Duration
	// HeartbeatInterval and MissedBeats: a running execution not renewed for
	// MissedBeats*HeartbeatInterval has lost its owner and is reset. Defaults 2s and 3.
	HeartbeatInterval time.Duration
	MissedBeats       int
	// Batch bounds the executions reset and claimed per pass. Default 100.
	Batch int
	// OnTakeover, when set, is called after a pass reset stale executions (the compensator
	// stays quiet for a while after takeovers).
	OnTakeover func()
	Clock      clockwork.Clock
	Logger     *slog.Logger
	// Registerer takes the poller's metrics; give it the executor's registry. Default: a
	// private registry.
	Registerer prometheus.Registerer
}

// Poller is the per-instance loop of durable retries and takeover: each pass it resets the
// running executions whose owner stopped renewing them (crashed, frozen, cut off) to pending,
// due now, then claims the pending executions that are due (retries, reset and handed-back
// ones) and runs their next attempt on the executor. Both steps are compare-and-sets in the
// store: of instances polling at once exactly one resets and one claims each execution.
type Poller struct {
	cfg   PollerConfig
	store PollerStore
	exec  *Executor
	clk   clockwork.Clock
	log   *slog.Logger
	m     *metrics

	mu      sync.Mutex
	cancel  context.CancelFunc
	done    chan struct{}
	stopped bool
}

// NewPoller returns a poller that runs claimed executions on exec; nothing runs until Start.
func NewPoller(cfg PollerConfig, store PollerStore, exec *Executor) (*Poller, error) {
	if cfg.InstanceID == "" {
		return nil, errors.New("executor: poller: InstanceID is required")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultRetryPoll
	}
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if cfg.MissedBeats <= 0 {
		cfg.MissedBeats = DefaultMissedHeartbeats
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 100
	}
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	return &Poller{cfg: cfg, store: store, exec: exec, clk: cfg.Clock, log: cfg.Logger.With("component", "poller"), m: m}, nil
}

// Start begins polling; it returns at once. It runs until Stop.
func (p *Poller) Start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done != nil || p.stopped {
		return errors.New("executor: poller already started")
	}
	ctx, p.cancel = context.WithCancel(context.WithoutCancel(ctx))
	p.done = make(chan struct{})
	go p.loop(ctx, p.done)
	return nil
}

// Stop stops polling and waits for the loop (not for the executions it submitted: those
// belong to the executor). Idempotent.
func (p *Poller) Stop() {
	p.mu.Lock()
	p.stopped = true
	cancel, done := p.cancel, p.done
	p.cancel = nil
	p.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

func (p *Poller) loop(ctx context.Context, done chan struct{}) {
	defer close(done)
	var timer clockwork.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	failing := false
	for {
		err := p.RunOnce(ctx, p.clk.Now())
		if err != nil && !failing && ctx.Err() == nil {
			p.log.Warn("retry and takeover pass failed; retrying", "err", err)
		}
		failing = err != nil
		now := p.clk.Now()
		wait := now.Truncate(p.cfg.Interval).Add(p.cfg.Interval).Sub(now)
		if timer == nil {
			timer = p.clk.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-ctx.Done():
			return
		case <-timer.Chan():
		}
	}
}

// PassResult counts what one pass did.
type PassResult struct {
	TakenOver, Claimed int
}

// RunOnce resets stale executions, then claims due ones and submits them, one batch each.
func (p *Poller) RunOnce(ctx context.Context, now time.Time) error {
	_, err := p.runOnce(ctx, now)
	return err
}

func (p *Poller) runOnce(ctx context.Context, now time.Time) (PassResult, error) {
	var res PassResult
	stale := now.Add(-time.Duration(p.cfg.MissedBeats) * p.cfg.HeartbeatInterval)
	reset, err := p.store.ResetStaleExecutions(ctx, dao.ResetStaleParams{
		StaleBeforeMS: stale.UnixMilli(), NowMS: now.UnixMilli(), Limit: p.cfg.Batch,
	})
	for _, e := range reset {
		p.log.Info("took over an execution whose owner stopped renewing it", "execution_id", e.ID,
			"key", dao.Key(e.TimerID, e.ScheduledMS), "previous_owner", e.Owner, "attempt", e.Attempt,
			"last_renewed_ms", e.UpdatedMS)
	}
	res.TakenOver = len(reset)
	p.m.takeovers.Add(float64(len(reset)))
	p.m.storeError(componentPoller, err)
	if len(reset) > 0 && p.cfg.OnTakeover != nil {
		p.cfg.OnTakeover()
	}
	if err != nil {
		return res, err
	}
	claimed, err := p.store.ClaimDueRetries(ctx, dao.ClaimRetriesParams{
		Owner: p.cfg.InstanceID, NowMS: now.UnixMilli(), Limit: p.cfg.Batch,
	})
	p.m.storeError(componentPoller, err)
	for i, e := range claimed {
		serr := p.exec.SubmitClaimed(ctx, e, func(r Result) {
			p.log.Debug("retry ran", "execution_id", e.ID, "attempt", e.Attempt, "outcome", r.Outcome, "reason", r.Reason)
		})
		if serr != nil {
			// Not started (stopping): hand this one and the rest back for another instance.
			p.handBack(claimed[i:])
			return res, errors.Join(err, serr)
		}
		res.Claimed++
	}
	return res, err
}

func (p *Poller) handBack(es []dao.Execution) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, e := range es {
		if err := p.store.HandBackExecution(ctx, e.ID, p.cfg.InstanceID, p.clk.Now().UnixMilli()); err != nil && !errors.Is(err, dao.ErrNotFound) {
			p.log.Warn("hand back a claimed execution", "execution_id", e.ID, "err", err)
			p.m.storeError(componentPoller, err)
		}
	}
}
