// Package migrator stamps timers' upcoming occurrences from the store (the source of truth)
// into the Redis index, where triggers find them.
//
// Window. Time is cut into steps (Step, default 1 min) aligned to the Unix epoch. While the
// clock is in the step starting at S, everything up to the horizon S + Step + Window
// (default 2 h) is stamped. At start-up a pass stamps [current minute, horizon); at each step
// boundary a pass stamps only the part newly entering the window, [S + Window, horizon): one
// minute of occurrences, so there is no hourly burst competing with firing. One instance does
// each step's pass: it holds the step's lock in Redis while it pages through the enabled
// timers (store.ListEnabledTimers) and sends ZADDs in pipelines (index.Index.Add: idempotent,
// 1000 members a round trip, no all-or-nothing batch). Every pass reads the whole timer table
// (by primary key, PageSize rows a query), so small steps cost one scan a minute.
//
// Marker. A finished pass sets the step's marker key to the horizon it vouches for (unix ms),
// expiring at that horizon. Every CheckEvery (10 s) the loop looks for the current step's
// marker; when it is missing, the pass reads the markers still alive (one MGET) and stamps
// from the furthest horizon they vouch for: one step at a boundary, the gap after skipped
// steps or a pass slower than a step, never the whole window again. When no marker is left
// (first start, Redis emptied or restarted) it stamps from the current minute, so an emptied
// Redis is rebuilt within seconds. Occurrences of the current minute that already fired are
// stamped again too: the executor's claim skips them.
//
// Occurrences come from schedule.Parse(spec, anchor) and schedule.Occurrences, computed
// from the previous scheduled time, never from now. A one-shot whose time is already past
// while the timer is still enabled (not executed yet) is stamped into the current minute's
// slice with its own scheduled time, so it fires at once.
//
// TimerChanged keeps the index in step with API writes: an enabled timer's window is
// stamped at once; when the schedule changed or the timer is no longer enabled, the old
// definition's members are removed (ZREM before ZADD in one pass, so occurrences shared by
// both definitions stay). Removal is best effort: the executor re-checks every occurrence
// against the stored timer, which is what guarantees that an old definition never fires.
//
// Memory: a timer firing every second has Step + Window worth of members in Redis (7,260
// with the defaults).
package migrator
