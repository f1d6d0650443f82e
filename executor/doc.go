// Package executor runs occurrences: it checks each against the stored timer, claims it,
// calls the timer's HTTP callback and records the result.
//
// Per occurrence (Execute):
//
//  1. Load the timer. Skip unless it is enabled and its current schedule has the
//     occurrence (schedule.Has; for a one-shot, scheduled == at). An occurrence stamped for
//     an older definition (rescheduled, disabled, deleted) is skipped here, whatever the
//     index still holds.
//  2. Claim it: store.ClaimExecution inserts the (timer_id, scheduled_ms) row, UNIQUE in the
//     store, only if the timer is still enabled at the version loaded in 1 (one conditional
//     statement). Not claimed: the row exists (executed or executing elsewhere) or the timer
//     changed since 1; either way it is settled and skipped.
//  3. Call the callback: method, URL, headers and body verbatim from the timer, plus
//     Tock-Timer-Id, Tock-Scheduled-At (RFC 3339 UTC, milliseconds, Z), Tock-Attempt and
//     Idempotency-Key ("<timer_id>:<scheduled unix ms>", the claim row's key and the ZSET
//     member). The timer's callback timeout bounds the call. 2xx is success; any other
//     status (redirects are not followed), a timeout or a connection error is a failure.
//     At most ResponseExcerptBytes of the body are kept; a little more is drained so the
//     connection can be reused.
//  4. Record the result (store.FinishExecution: status, HTTP status, duration, error or
//     response excerpt). A one-shot whose execution ended is marked completed.
//
// A panic while calling is a recorded failure. When the store fails (2 or 4), the result is
// Unrecorded and the trigger keeps its slice incomplete, so the occurrence is tried again.
//
// Retries with backoff (the reliability issue) fit between 3 and 4: more attempts of the
// claimed execution, each through attempt().
//
// Concurrency: an ants pool of PoolSize goroutines; Submit waits (context-aware) while
// PoolSize occurrences run. One http.Client, whose transport keeps PoolSize idle connections
// per host, serves every call. Stop waits for the calls in flight up to StopTimeout, then
// cancels them; their results are still recorded.
package executor
