// Package compensator finds work that should have happened and did not, and re-drives it
// through the normal executor path (seed 000, engine-side compensation). It also runs the
// catch-up after downtime and applies each timer's misfire policy.
//
// # What a pass looks for
//
//  1. Stuck executions: running rows not renewed (updated_ms, which heartbeats move) for
//     StuckAfter (2m), and pending rows whose retry was due StuckAfter ago. Each is handed
//     to executor.Submit; the executor's claim decides who runs it (an execution of another
//     live owner is skipped there).
//  2. Occurrences with no execution at all (the index lost them, or every instance was
//     down): see below.
//
// # Cost per slice, not per occurrence
//
// The scheduler calls RecordSliceDone (scheduler.Config.OnSliceDone) when a slice's trigger
// ran to the end, i.e. every occurrence the index held for that (minute, bucket) has a row.
// That writes one row of table slice_done: buckets rows per minute in total, whatever the
// number of timers. A pass reads slice_done for the catch-up window (60 minutes x buckets
// rows, one indexed range read) and works only on the settled slices that are NOT there.
// With everything healthy, that is the whole cost: one small read and the stuck-execution
// query, with 10 or 100,000 timers firing every second. Only when some slices are undone
// does a pass read the enabled timers (once, paged), keep a compact parsed schedule per
// timer, and for each undone slice recompute the occurrences of its bucket's timers
// (index.Keys.Bucket) and compare them with the timer_task rows of that time range, 500
// timers at a time through the (timer_id, scheduled_ms) unique index. A slice whose missing
// occurrences are all settled is then recorded done itself, so it is scanned once.
// MaxPerPass bounds what one pass re-drives or records; the rest is left for the next pass,
// which comes after FastInterval because Deferred counts as work found.
//
// A slice is settled 2.5 minutes after its start: the scheduler re-runs an incomplete slice
// during the next minute under a 1.5T lock, so after that no trigger touches it and the
// pass never races one. Knowledge starts at the earliest slice_done row: with no record at
// all (a new deployment) nothing is scanned. Records older than twice the window plus an
// hour are pruned. Occurrences at or before a timer's last change (updated_ms) are not
// expected, since the definition they belong to may not have existed then.
//
// # Misfire policies and the catch-up window
//
// A missing occurrence younger than CatchUpWindow (1h) follows its timer's policy:
// fire_all (default) fires each once, late; fire_once fires only the latest and records the
// others missed (a process-local map remembers the latest it fired, so passes reaching
// older slices later record those missed too); skip records them all missed. Older ones are
// recorded missed whatever the policy (dao.RecordMissed: a timer_task row with status
// missed, which also keeps the occurrence from ever being claimed). Missing occurrences are
// handled newest first.
//
// # Timing (seed 000)
//
// Start notes the start time. The start-up catch-up runs once the slices this instance's
// scheduler cannot reach have settled (at most 30 s after start): it is a normal pass that
// also goes back to two minutes before the last completed slice, so the minutes of a
// downtime longer than the window are recorded missed, never silently dropped. After that,
// a scheduled pass runs when all hold: Grace (10m) since start, Quiet (1m) since the last
// NoteTakeover (the takeover poller calls it, so compensation does not compete with
// takeovers under way), and the current interval since the last pass. The interval starts
// at FastInterval (10s), stays there while passes find work, and becomes SlowInterval (10m)
// after a pass that finds none. RunNow (POST /api/v1/admin/compensation/run) runs a pass at
// once; Status (GET /api/v1/admin/compensation) reports uptime, last pass and interval.
//
// Re-driven occurrences pass a token bucket of Rate per second (golang.org/x/time/rate,
// reserved on the injected clock) and the executor's own bounded pool. A pass waits for the
// results of what it submitted. Stop cancels the loop and waits for it.
package compensator
