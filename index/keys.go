package index

import (
	"hash/fnv"
	"strconv"
	"time"

	"github.com/tockd/tock/dao"
)

// SliceLen is T, the time one slice covers: one UTC minute.
const SliceLen = time.Minute

// sliceFormat names a slice's minute inside its key (seed 003: "yyyy-MM-dd HH:mm_bucketId").
const sliceFormat = "2006-01-02 15:04"

// Slice is one minute of one bucket: the unit a trigger works and a lock guards.
type Slice struct {
	Start  time.Time // UTC, a whole minute
	Bucket int
}

// SliceAt returns the slice of bucket that contains t.
func SliceAt(t time.Time, bucket int) Slice {
	return Slice{Start: SliceStart(t), Bucket: bucket}
}

// SliceStart truncates t to its UTC minute.
func SliceStart(t time.Time) time.Time { return t.UTC().Truncate(SliceLen) }

// End is the first instant after the slice.
func (s Slice) End() time.Time { return s.Start.Add(SliceLen) }

// Prev is the same bucket one minute earlier.
func (s Slice) Prev() Slice { return Slice{Start: s.Start.Add(-SliceLen), Bucket: s.Bucket} }

// String is the slice's name inside its keys, e.g. "2026-11-21 09:00_3".
func (s Slice) String() string {
	return s.Start.UTC().Format(sliceFormat) + "_" + strconv.Itoa(s.Bucket)
}

// Keys builds every Redis key tock uses. Keys of one slice share a {hash tag} so they live in
// one Redis Cluster slot and one Lua script may touch them together.
type Keys struct {
	prefix  string
	buckets int
}

// NewKeys returns the key builder for a deployment's prefix and bucket count. Every instance
// of a deployment must use the same bucket count, or timers would be looked for in the wrong
// bucket.
func NewKeys(prefix string, buckets int) Keys {
	if buckets < 1 {
		buckets = 1
	}
	return Keys{prefix: prefix, buckets: buckets}
}

// Prefix is the deployment's key prefix.
func (k Keys) Prefix() string { return k.prefix }

// Buckets is the number of buckets per minute.
func (k Keys) Buckets() int { return k.buckets }

// Bucket is the timer's bucket: FNV-1a of its decimal id modulo the bucket count, stable across
// processes and restarts.
func (k Keys) Bucket(timerID int64) int {
	h := fnv.New32a()
	_, _ = h.Write(strconv.AppendInt(nil, timerID, 10))
	return int(h.Sum32() % uint32(k.buckets))
}

// Slice is the ZSET of a slice's occurrences: member dao.Key(timer, ms), score the scheduled
// unix ms. Example: "tock:{2026-11-21 09:00_3}".
func (k Keys) Slice(s Slice) string { return k.prefix + "{" + s.String() + "}" }

// SliceLock is the slice's lock, in the ZSET's slot: "tock:{2026-11-21 09:00_3}:lock".
func (k Keys) SliceLock(s Slice) string { return k.Slice(s) + ":lock" }

// SliceSeq counts the changes made to the slice's ZSET, so triggers can poll one integer
// often and re-read the ZSET only when it moved: "tock:{2026-11-21 09:00_3}:seq".
func (k Keys) SliceSeq(s Slice) string { return k.Slice(s) + ":seq" }

// MigrateLock is held by the one instance stamping the window of the migrator step starting
// at step: "tock:{migrate}:lock:2026-11-21 09:00".
func (k Keys) MigrateLock(step time.Time) string {
	return k.prefix + "{migrate}:lock:" + step.UTC().Format(sliceFormat)
}

// MigrateMarker exists while the window stamped for the step starting at step is in Redis;
// its absence (Redis emptied or restarted) makes the migrator stamp again:
// "tock:{migrate}:done:2026-11-21 09:00".
func (k Keys) MigrateMarker(step time.Time) string {
	return k.prefix + "{migrate}:done:" + step.UTC().Format(sliceFormat)
}

// Member is the ZSET member of an occurrence: the idempotency key "<timer_id>:<unix ms>".
func Member(timerID, scheduledMS int64) string { return dao.Key(timerID, scheduledMS) }
