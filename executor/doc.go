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
//  4. Record the attempt (store.RecordAttempt: one timer_task_attempt row, and the
//     execution's new state in the same transaction, only while this instance owns it):
//     succeeded; failed for good (a 4xx other than 408/429, a redirect, or the last of the
//     timer's max_attempts); or pending with next_retry_ms = now + a delay drawn in
//     [0, min(max_backoff, backoff*2^(n-1))] (full jitter) after a timeout, a connection
//     error, 408, 429 or 5xx. A one-shot whose execution ended is marked completed.
//
// A panic while calling is a recorded failure. When the store fails at 2, the result is
// Unrecorded and the trigger keeps its slice incomplete, so the occurrence is tried again;
// a result is retried against a failing store for up to ResultWriteTimeout.
//
// Leases (seeds 001, 002). An execution in flight is running with an owner; the heartbeat
// loop (Start) renews it every HeartbeatInterval with a compare-and-set on the owner
// (RenewExecution, which moves heartbeat_ms and updated_ms). A renewal that finds another
// owner marks the run lost: its result is not written (the store also checks the owner).
// The Poller of every instance resets running executions not renewed for MissedBeats
// intervals to pending, due now (CAS on owner and updated_ms: one instance wins), and
// claims due pending executions (CAS on status), running attempt n+1 through the same
// path. Durable retries, takeovers of crashed or frozen owners and executions handed back
// at shutdown are all the same thing: a pending row with next_retry_ms.
//
// Concurrency: an ants pool of PoolSize goroutines; Submit waits (context-aware) while
// PoolSize occurrences run. One http.Client, whose transport keeps PoolSize idle connections
// per host, serves every call. Stop waits for the calls in flight up to StopTimeout, then
// cancels them and hands their executions back (pending, due now, no owner), so another
// instance runs them at once; then it stops the heartbeats.
package executor
