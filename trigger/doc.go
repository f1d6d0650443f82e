// Package trigger fires the occurrences of one slice (one minute of one bucket) at their
// scheduled millisecond.
//
// A Trigger reads its slice's whole ZSET in one round trip and keeps the members not yet
// fired in a queue ordered by scheduled time. It sleeps on the injected clock until the
// earliest of: the head of the queue is due (to the millisecond, never rounded to a poll),
// the next ChangePoll (100 ms) at which it reads the slice's change counter (one integer,
// bumped by every stamp or removal) and re-reads the slice if it moved, the next whole Poll
// (1 s) at which it re-reads the slice anyway, the end of the grace period, or its
// deadline. So an occurrence stamped after the trigger started (a timer created a moment
// ago) is picked up within 100 ms, and fires on time if it was stamped earlier than that. An occurrence counts as
// due once the clock has reached its millisecond, so nothing fires early; occurrences
// already overdue when the slice is taken (a late start, the re-run of a previous slice)
// fire at once instead of being replayed in real time.
//
// Due occurrences go to the executor, which answers on its own goroutines; the answers are
// collected at the trigger's next wake-up, so the trigger only ever wakes on the clock. An
// occurrence the executor could not record (the store failed) is forgotten as fired and is
// submitted again at the next read, until the deadline.
//
// The run is complete when, after the slice's end plus Grace (2 s, for occurrences stamped
// at the last moment), a read finds nothing unfired and every fired occurrence has come
// back recorded: succeeded, failed, already executed, or skipped because the timer no longer
// has it. Only then does the scheduler extend the slice lock past 2T. A run that reaches
// its deadline (the lock's expiry minus a margin, so no other instance works the slice at
// the same time) ends incomplete; its lock expires unextended and the scheduler's
// previous-slice pass runs the slice again: at-least-once, with the store's claim making the
// callback itself once per occurrence.
package trigger
