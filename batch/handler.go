package batch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/tockd/tock/dao"
)

// Handler performs one operation on one timer; the registry keys handlers by Operation. A
// new operation is one Handler and one Register call.
//
// Do and Undo must be idempotent: a task can run again after its runner died between
// changing the timer and recording the outcome. So a handler first checks whether the timer
// is already in the wanted state (the journal of an earlier attempt in Work.Task tells
// whether that state is its own doing), records what it is about to do with Work.Journal
// before changing the timer, and honours ctx: it is canceled at the handler's timeout.
//
// An error is retried (the task goes back to pending, up to Config.MaxRetries times) unless
// it is marked with Permanent; a timeout is always retried.
type Handler interface {
	// Operation is the name clients use, e.g. "disable".
	Operation() string
	// Timeout bounds one run of one task (Config.Timeouts may override it).
	Timeout() time.Duration
	// Reversible reports whether Undo can roll a finished batch back.
	Reversible() bool
	// Validate checks the operation's parameters when a batch is created (params is nil when
	// the client sent none) and returns the form to store. Its errors reach the client as is.
	Validate(params json.RawMessage, now time.Time) (json.RawMessage, error)
	// Do performs the operation on the task's timer.
	Do(ctx context.Context, w *Work) error
	// Undo restores the timer from the task's before-image.
	Undo(ctx context.Context, w *Work) error
}

// Op is a Handler made of functions.
type Op struct {
	Name string
	// MaxDuration is the timeout of one run.
	MaxDuration time.Duration
	// ValidateParams checks parameters; nil accepts none.
	ValidateParams func(params json.RawMessage, now time.Time) (json.RawMessage, error)
	// Run is Do.
	Run func(ctx context.Context, w *Work) error
	// Revert is Undo; nil makes the operation irreversible.
	Revert func(ctx context.Context, w *Work) error
}

func (o Op) Operation() string      { return o.Name }
func (o Op) Timeout() time.Duration { return o.MaxDuration }
func (o Op) Reversible() bool       { return o.Revert != nil }

func (o Op) Validate(params json.RawMessage, now time.Time) (json.RawMessage, error) {
	if o.ValidateParams != nil {
		return o.ValidateParams(params, now)
	}
	if len(params) > 0 {
		return nil, Permanent(fmt.Errorf("%w: operation %s takes no parameters", ErrInvalidParams, o.Name))
	}
	return nil, nil
}

func (o Op) Do(ctx context.Context, w *Work) error { return o.Run(ctx, w) }

func (o Op) Undo(ctx context.Context, w *Work) error {
	if o.Revert == nil {
		return Permanent(fmt.Errorf("%w: %s", ErrNotReversible, o.Name))
	}
	return o.Revert(ctx, w)
}

// registry maps operations to handlers.
type registry struct {
	mu sync.RWMutex
	m  map[string]Handler
}

func (r *registry) register(h Handler) error {
	op := h.Operation()
	if op == "" || h.Timeout() <= 0 {
		return fmt.Errorf("batch: register %q: a handler needs an operation name and a positive timeout", op)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]Handler{}
	}
	if _, dup := r.m[op]; dup {
		return fmt.Errorf("batch: register %q: already registered", op)
	}
	r.m[op] = h
	return nil
}

func (r *registry) get(op string) (Handler, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	h, ok := r.m[op]
	return h, ok
}

func (r *registry) operations() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	ops := make([]string, 0, len(r.m))
	for op := range r.m {
		ops = append(ops, op)
	}
	slices.Sort(ops)
	return ops
}

// Work is one claimed task handed to a handler.
type Work struct {
	// Job is the task's batch (operation, parameters, creation time).
	Job dao.BatchJob
	// Task is the task as claimed. Task.Before and Task.After hold what an earlier attempt
	// journaled (or, in a rollback, what the forward run recorded).
	Task dao.BatchTask

	b       *Batch
	version int64
	before  *dao.Timer
	after   *dao.Timer
}

// Store is the store the batch runs on, for handlers that need more than their own
// dependencies (reading a deleted timer, restoring an image).
func (w *Work) Store() Store { return w.b.store }

// Now is the runner's clock.
func (w *Work) Now() time.Time { return w.b.clock.Now() }

// Journal records, before the handler changes the timer, what it changes it from and to.
// It fences: ErrTaskLost means the task was taken back by another runner, and the handler
// must return without changing the timer.
func (w *Work) Journal(ctx context.Context, before, after dao.Timer) error {
	v, err := w.b.store.JournalBatchTask(ctx, w.Task.ID, w.version, before, after, w.b.clock.Now().UnixMilli())
	if errors.Is(err, dao.ErrVersionConflict) {
		return ErrTaskLost
	}
	if err != nil {
		return err
	}
	w.version = v
	w.Task.Before, w.Task.After = dao.Image(before), dao.Image(after)
	return nil
}

// SetImages sets the before- and after-image written with the task's outcome: the timer as
// it was and as it was really written. Images equal to the recorded ones (an exact journal)
// are not written again.
func (w *Work) SetImages(before, after dao.Timer) {
	w.before, w.after = nil, nil
	if !w.Task.Before.Valid || !reflect.DeepEqual(w.Task.Before.Timer, before) {
		w.before = &before
	}
	if !w.Task.After.Valid || !reflect.DeepEqual(w.Task.After.Timer, after) {
		w.after = &after
	}
}

// permanent marks an error that retrying cannot fix.
type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }
func (p permanent) Unwrap() error { return p.err }

// Permanent marks err as not worth retrying: the task fails at once.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanent{err}
}

// IsPermanent reports whether err was marked with Permanent.
func IsPermanent(err error) bool {
	var p permanent
	return errors.As(err, &p)
}
