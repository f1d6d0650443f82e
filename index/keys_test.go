package index

import (
	"testing"
	"time"
)

func TestKeys(t *testing.T) {
	t.Parallel()
	k := NewKeys("tock:", 8)
	s := SliceAt(time.Date(2026, 11, 21, 9, 0, 42, 500e6, time.UTC), 3)

	t.Run("SliceNamesMinuteAndBucketInHashTag", func(t *testing.T) {
		if got, want := k.Slice(s), "tock:{2026-11-21 09:00_3}"; got != want {
			t.Fatalf("Slice = %q, want %q", got, want)
		}
		if got, want := k.SliceLock(s), "tock:{2026-11-21 09:00_3}:lock"; got != want {
			t.Fatalf("SliceLock = %q, want %q", got, want)
		}
	})
	t.Run("SliceUsesUTC", func(t *testing.T) {
		berlin, err := time.LoadLocation("Europe/Berlin")
		if err != nil {
			t.Skip("no tzdata:", err)
		}
		local := SliceAt(time.Date(2026, 11, 21, 10, 0, 5, 0, berlin), 3)
		if local != s {
			t.Fatalf("slice of 10:00:05 Berlin = %v, want %v", local, s)
		}
	})
	t.Run("PrevAndEnd", func(t *testing.T) {
		if got := s.Prev().String(); got != "2026-11-21 08:59_3" {
			t.Fatalf("Prev = %q", got)
		}
		if got := s.End(); !got.Equal(time.Date(2026, 11, 21, 9, 1, 0, 0, time.UTC)) {
			t.Fatalf("End = %v", got)
		}
	})
	t.Run("MigratorKeys", func(t *testing.T) {
		step := time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC)
		if got, want := k.MigrateLock(step), "tock:{migrate}:lock:2026-11-21 09:00"; got != want {
			t.Fatalf("MigrateLock = %q, want %q", got, want)
		}
		if got, want := k.MigrateMarker(step), "tock:{migrate}:done:2026-11-21 09:00"; got != want {
			t.Fatalf("MigrateMarker = %q, want %q", got, want)
		}
	})
	t.Run("BucketIsStableFNV1aOfDecimalID", func(t *testing.T) {
		// FNV-1a 32 of "1" is 0x340ca71c, of "12345" 0x43c2c0d8 (fixed vectors, so a change of
		// hash cannot slip in: it would strand every stamped occurrence).
		if got, want := k.Bucket(1), int(uint32(0x340ca71c)%8); got != want {
			t.Fatalf("Bucket(1) = %d, want %d", got, want)
		}
		if got, want := k.Bucket(12345), int(uint32(0x43c2c0d8)%8); got != want {
			t.Fatalf("Bucket(12345) = %d, want %d", got, want)
		}
		seen := map[int]int{}
		for id := int64(1); id <= 8000; id++ {
			b := k.Bucket(id)
			if b < 0 || b >= 8 {
				t.Fatalf("Bucket(%d) = %d out of range", id, b)
			}
			seen[b]++
		}
		for b := 0; b < 8; b++ {
			if seen[b] < 700 || seen[b] > 1300 {
				t.Fatalf("bucket %d got %d of 8000 ids: not spread", b, seen[b])
			}
		}
	})
	t.Run("MemberIsIdempotencyKey", func(t *testing.T) {
		if got := Member(42, 1795165200000); got != "42:1795165200000" {
			t.Fatalf("Member = %q", got)
		}
	})
}
