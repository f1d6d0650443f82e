// Package scheduler shares the slices out between instances and runs a trigger for each
// slice this instance takes.
//
// Every second, aligned to the clock's whole second, RunOnce looks at the current minute
// and the previous one. For each bucket (starting at a random bucket, so that instances
// spread over the buckets instead of racing for the same one) it tries the slice's lock:
// SET NX PX with a random owner token (index.TryLock). A lock it gets starts a trigger.
//
// Lock timing, with T the slice length (one minute):
//
//   - The current slice's lock expires 1.5T after the slice's start (LockTTL), whenever it
//     was taken: between 1T and 2T.
//   - The trigger stops working the slice Margin (5 s) before the lock can expire, so that
//     no two instances ever work one slice at once (given clocks that agree within the
//     margin).
//   - When the trigger completes the slice (everything fired and recorded), the lock is
//     extended to 2.5T from then (DoneTTL), through the compare-the-token script.
//   - The previous minute's slice is tried every second too. Its lock is free only if its
//     run did not complete (the lock expired at 1.5T unextended) or never happened; then
//     the slice is run again. Occurrences already recorded are skipped by the executor's
//     claim, so the re-run only fires what is missing: at-least-once, exactly one callback
//     per recorded occurrence.
//
// A slice whose re-run fails as well is left to the recovery of the reliability issue.
//
// Stop stops taking slices, cancels the triggers, waits for them, and releases the locks of
// the slices that did not complete, so another instance takes them over within a second.
package scheduler
