// Package batch runs one operation over many timers: pause every timer of an app, re-enable
// them, move thousands of callbacks to a new URL, delete a tenant's timers. A batch (table
// batch_job) is split into one task per target timer (table batch_task); tasks are run by a
// fixed pool of workers, retried, canceled and rolled back, on any number of instances at
// once. The design follows seed 004 (a CDC batch scheduler), with its rough edges fixed (see
// the end).
//
// # Flow
//
// Create validates the operation's parameters with its handler, resolves the target (a list
// of ids, or a selector: app, status, name prefix) to timer ids once, and inserts the batch
// and all its tasks in one transaction, then wakes the dispatcher. The dispatcher reads the
// runnable tasks of unfinished batches (oldest first) into a bounded queue (QueueSize) that
// never holds a task twice, and is woken again on create and rollback, whenever the queue has
// drained to half, and after every scan. Workers (a fixed pool of Workers goroutines) take a
// task and
//
//  1. claim it: one UPDATE that moves it pending -> running only if it still has the version
//     and status read, and its batch is still pending or running (compare-and-set; no
//     transaction is held across the work, nothing stays locked if the instance dies). The
//     claim sets a deadline: the handler's timeout plus LeaseGrace;
//  2. run the operation's Handler under its timeout (a registry keyed by operation; each
//     handler has its own timeout, Config.Timeouts may override it);
//  3. release it: success, fail, or back to pending with one more retry, again by
//     compare-and-set on the version, so an outcome that comes too late is dropped.
//
// The scanner runs every ScanInterval: it takes back running tasks past their deadline (their
// runner died or hangs), aggregates the status of every unfinished batch, restarts the
// dispatcher when the queue stopped draining, and wakes the dispatcher, which re-queues what
// is pending after a restart or a dispatch lost to a full queue. Between scans, the batches
// this instance worked on are aggregated every RefreshInterval, and Get aggregates on read.
//
// # States
//
// Task: pending -> running -> success | fail; a timeout or a transient error (any error not
// marked Permanent) returns the task to pending with retry+1, up to MaxRetries (2), then it
// fails. Rollback: rollback_pending -> rollback_running -> rollback_success | rollback_fail,
// with the same retries. cancel ends a task that never started.
//
// Batch, aggregated from its tasks: pending (nothing claimed yet), running, then success (no
// failure), fail (no success) or partial_fail; cancel (sticky; finished once nothing runs);
// rollback_running, then rollback_success or rollback_fail (tasks with nothing to roll back
// keep their status and do not count). Every transition of a batch's status is a
// compare-and-set on its version, so instances aggregating at once agree.
//
// # Exactly once, in effect
//
// A task is claimed by one runner at a time, but a runner can die after changing the timer
// and before recording it, and a hung runner can lose its claim to a take-back. So:
//
//   - A handler first checks whether the timer is already in the wanted state, and
//     Work.Journal records the before- and after-image (the timer as it is, and as it will
//     be written, version included) before it changes anything. Journal is a compare-and-set
//     on the claim's version: a runner whose claim was taken back gets ErrTaskLost and must
//     not write.
//   - Timer writes are themselves optimistic (the timer's version), so two runners can never
//     both apply a change.
//   - A run after a crash finds the journal and the timer at the journaled version and
//     content: the change was made, it is not made again (the engine is told again, which
//     is idempotent).
//
// Canceling the context given to Start is a crash: handlers are canceled and no outcome is
// written. A restarted instance with the same Deps.Instance takes back its previous
// life's claims at Start; any other instance takes them back after their deadline. Stop is
// the graceful end: producers stop first, each worker finishes its task.
//
// # Cancel and rollback
//
// Cancel (of a pending or running batch) sets the batch to cancel and its pending tasks to
// cancel in one transaction; claims check the batch's status in the same UPDATE, so no task
// starts after the cancel commits and running ones finish. A task retried or taken back
// after the cancel is canceled by the next aggregation.
//
// Rollback (of a finished batch whose operation is reversible) moves every task that recorded
// a before-image to rollback_pending; the handler's Undo writes the before-image back only if
// the timer is still at the after-image's version: a timer changed since the batch is not
// overwritten, its task fails with the reason. A rollback that failed in part can be asked
// for again. "Exact previous state" is the timer's content (name, status, schedule, anchor,
// callback, retry policy); its version moves forward, as every change's does.
//
// # Seed 004's rough edges, fixed
//
//   - The seed held a REPEATABLE READ transaction with SELECT ... FOR UPDATE from claim to
//     release, across the work, after a READ UNCOMMITTED dirty read: long transactions, a
//     locked row per running task, and a dead process's locks held until its connection
//     timed out. Here every step is one short compare-and-set.
//   - On a timeout the seed's watchdog released the task while the job kept running and
//     released it again (two writers, a send on a channel nobody read). Here the worker
//     alone releases, once, after the handler returned; a late outcome fails its
//     compare-and-set.
//   - Its queue de-duplication checked and inserted in two critical sections and forgot an
//     id when a worker took it (a scan could queue a running task again); here one lock
//     covers check and insert, and an id is forgotten when its worker is done.
//   - Only timeouts were retried; here transient errors are too, and a panic is a recorded
//     failure.
//   - Its aggregation left a batch "running" forever when tasks were canceled or rolled
//     back, and had no answer for several combinations; Aggregate has one for each.
//   - Cancel took effect at the next scan (20 s); here at once, in the claim.
//   - Its dispatcher restart fired when the queue grew across scans (which a long, healthy
//     batch does) and closed the workers without starting new ones; here it fires when the
//     queue held tasks and no worker took one for StalledScans scans, and replaces the queue
//     and the whole pool.
//   - Its metrics labeled series by task and batch id (unbounded) and computed queue usage
//     with integer division (always 0); here labels are operation, phase, outcome, status.
//   - A task that died with its process stayed running; here its deadline brings it back.
//
// # Metrics
//
// tock_batch_queue_length, tock_batch_queue_capacity, tock_batch_queue_usage_ratio,
// tock_batch_queue_full_total, tock_batch_workers, tock_batch_workers_busy,
// tock_batch_task_duration_seconds{operation,phase},
// tock_batch_tasks_total{operation,phase,outcome}, tock_batch_status_changes_total{status},
// tock_batch_dispatcher_restarts_total, tock_batch_tasks_taken_back_total.
package batch
