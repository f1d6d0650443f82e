// Package index is tock's hot index in Redis: per-minute, per-bucket ZSETs of upcoming
// occurrences, the slice locks that share them out between instances, and the clients that
// reach Redis.
//
// A slice is one UTC minute (T = 60 s) of one bucket. A timer's bucket is FNV-1a of its
// decimal id modulo the bucket count, so every instance agrees on it. The slice's ZSET holds
// member "<timer_id>:<scheduled unix ms>" (the occurrence's idempotency key, as in the
// timer_task UNIQUE key and the callback's Idempotency-Key header) with the scheduled unix ms
// as score. Its key carries the slice name in a hash tag, "<prefix>{2026-11-21 09:00_3}", and
// the slice's lock is the same key plus ":lock", and its change counter (":seq", bumped by
// every stamp or removal, polled cheaply by triggers) likewise, so they share one Redis
// Cluster slot. The
// migrator's lock and window marker keys are built here too: keys.go is the only place that
// spells a key.
//
// Stamping is idempotent (ZADD) and sent in pipelines of BatchSize members; a batch that
// fails leaves the ones before it in place, and stamping again is harmless. Each slice ZSET
// expires Retention after its minute, so Redis does not accumulate old slices.
//
// Locks are SET key token NX PX ttl with a random token; Extend and Release run scripts that
// compare the token first. Scripts never read Redis's clock: TTLs come from the caller.
//
// Redis is only an index: MySQL is the source of truth, and the migrator rebuilds the index
// when it finds its window marker missing. The executor's checks against MySQL, not the
// index, decide whether an occurrence fires.
//
// Embedded mode runs miniredis in-process. miniredis expires keys only when told that time
// moved, so Embedded moves its time to the injected clock every 50 ms (and on Sync).
package index
