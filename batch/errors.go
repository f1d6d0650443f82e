package batch

import "errors"

// Sentinel errors of the batch service; the API maps them to HTTP answers. They come wrapped
// with the details ("unknown operation \"foo\"; one of ...").
var (
	// ErrUnknownOperation: no handler is registered for the operation.
	ErrUnknownOperation = errors.New("unknown operation")
	// ErrInvalidParams: the operation's parameters are not acceptable.
	ErrInvalidParams = errors.New("invalid parameters")
	// ErrEmptyTarget: the target lists no timer.
	ErrEmptyTarget = errors.New("empty target")
	// ErrNoMatch: the selector matches no timer.
	ErrNoMatch = errors.New("no timer matches the selector")
	// ErrUnknownTimers: listed ids name no live timer.
	ErrUnknownTimers = errors.New("unknown timers")
	// ErrTooManyTargets: more timers than Config.MaxTargets.
	ErrTooManyTargets = errors.New("too many timers")
	// ErrIdempotency: the request id was used with another request.
	ErrIdempotency = errors.New("request_id reused with a different request")
	// ErrRunning: the batch is still running (rollback refused).
	ErrRunning = errors.New("batch is running")
	// ErrFinished: the batch has finished (cancel refused).
	ErrFinished = errors.New("batch has finished")
	// ErrRolledBack: the batch was rolled back already.
	ErrRolledBack = errors.New("batch was rolled back already")
	// ErrNotReversible: the batch's operation cannot be rolled back.
	ErrNotReversible = errors.New("operation cannot be rolled back")
	// ErrTaskLost: the task was taken back by another runner while a handler worked on it.
	ErrTaskLost = errors.New("batch: task taken back by another runner")
)
