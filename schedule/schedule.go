// Package schedule parses a timer's schedule and computes its occurrences.
//
// Three kinds exist: cron (robfig/cron/v3 as a parser only, 5 or 6 fields or a descriptor, in
// an IANA time zone), every (a fixed period counted from the timer's anchor) and at (one
// occurrence). The user may also send "in", a one-shot relative to now; it is stored as "at".
//
// Occurrences are always computed from the previous scheduled time, never from "now", so a
// schedule does not drift however late the engine runs.
//
// DST: cron fields are wall-clock times in the timer's zone, with the rules of Vixie cron.
// A schedule whose hour field is fixed ("30 2 * * *") fires once per matching local day: a
// time inside a spring-forward gap (02:30 in Europe/Berlin on 2026-03-29) fires at the first
// instant after the gap (03:00 local), and a time that exists twice on a fall-back day (02:30
// on 2026-10-25) fires at its first instance only. A schedule whose hour field is "*" follows
// absolute time: "0 * * * *" fires every real hour, so 24 - 1 times on spring-forward day
// and 24 + 1 on fall-back day. schedule_test.go pins these sequences with fixed dates.
package schedule

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Kind names the three stored schedule kinds.
type Kind string

const (
	KindCron  Kind = "cron"
	KindEvery Kind = "every"
	KindAt    Kind = "at"
)

// MinEvery is the shortest period an "every" schedule may have.
const MinEvery = time.Second

// Spec is the schedule as users send it and as it is stored (after Normalize, "in" is "at").
type Spec struct {
	Cron     string `json:"cron,omitempty"`
	Timezone string `json:"timezone,omitempty"`
	Every    string `json:"every,omitempty"`
	At       string `json:"at,omitempty"`
	In       string `json:"in,omitempty"`
}

// Error is a schedule validation error naming the offending field.
type Error struct {
	Code    string // invalid_schedule, unknown_timezone, schedule_never_fires
	Field   string // e.g. schedule.cron
	Message string
}

func (e *Error) Error() string { return fmt.Sprintf("schedule: %s: %s", e.Field, e.Message) }

func invalid(field, format string, args ...any) *Error {
	return &Error{Code: "invalid_schedule", Field: field, Message: fmt.Sprintf(format, args...)}
}

// Schedule yields the occurrences of one timer.
type Schedule interface {
	// Next returns the first occurrence strictly after t, or the zero time when there is none.
	Next(t time.Time) time.Time
	Kind() Kind
}

var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Normalize validates a user's spec at time now and returns the form to store: "in" becomes
// an absolute "at" in RFC 3339 UTC with milliseconds, a cron's zone defaults to UTC. It also
// checks that the schedule fires at least once after now (a past "at" fires at once, so it is
// accepted).
func Normalize(s Spec, now time.Time) (Spec, error) {
	set := 0
	for _, v := range []string{s.Cron, s.Every, s.At, s.In} {
		if v != "" {
			set++
		}
	}
	if set != 1 {
		return Spec{}, invalid("schedule", "exactly one of cron, every, at or in is required")
	}
	if s.Timezone != "" && s.Cron == "" {
		return Spec{}, invalid("schedule.timezone", "timezone applies to cron schedules only")
	}
	if s.In != "" {
		d, err := time.ParseDuration(s.In)
		if err != nil || d < 0 {
			return Spec{}, invalid("schedule.in", "%q is not a non-negative duration like 30m", s.In)
		}
		if d > 100*365*24*time.Hour {
			return Spec{}, invalid("schedule.in", "%q is more than 100 years away", s.In)
		}
		return Spec{At: FormatTime(now.Add(d))}, nil
	}
	if s.Cron == "" {
		s.Timezone = ""
	} else if s.Timezone == "" {
		s.Timezone = "UTC"
	}
	sched, err := Parse(s, now)
	if err != nil {
		return Spec{}, err
	}
	if s.At != "" {
		s.At = FormatTime(sched.Next(time.Time{}))
		return s, nil
	}
	if sched.Next(now).IsZero() {
		field := "schedule.cron"
		if s.Every != "" {
			field = "schedule.every"
		}
		return Spec{}, &Error{Code: "schedule_never_fires", Field: field, Message: "the schedule has no occurrence in the next five years"}
	}
	return s, nil
}

// Parse turns a stored spec into a Schedule. anchor is where an "every" schedule counts from
// (its first occurrence is anchor+every); other kinds ignore it.
func Parse(s Spec, anchor time.Time) (Schedule, error) {
	switch {
	case s.Cron != "":
		return parseCron(s.Cron, s.Timezone)
	case s.Every != "":
		d, err := time.ParseDuration(s.Every)
		if err != nil {
			return nil, invalid("schedule.every", "%q is not a duration like 30s", s.Every)
		}
		if d < MinEvery {
			return nil, invalid("schedule.every", "%q is shorter than %s", s.Every, MinEvery)
		}
		if d%time.Millisecond != 0 {
			return nil, invalid("schedule.every", "%q is not a whole number of milliseconds", s.Every)
		}
		return every{period: d, anchor: anchor.Truncate(time.Millisecond)}, nil
	case s.At != "":
		t, err := time.Parse(time.RFC3339Nano, s.At)
		if err != nil {
			return nil, invalid("schedule.at", "%q is not an RFC 3339 time like 2026-11-21T09:00:00Z", s.At)
		}
		if t.Year() < 1970 || t.Year() > 9999 {
			return nil, invalid("schedule.at", "%q is out of range", s.At)
		}
		return at{t: t.UTC().Truncate(time.Millisecond)}, nil
	default:
		return nil, invalid("schedule", "exactly one of cron, every, at or in is required")
	}
}

func parseCron(expr, zone string) (Schedule, error) {
	expr = strings.TrimSpace(expr)
	if strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ=") {
		return nil, invalid("schedule.cron", "set the zone with schedule.timezone, not inside the expression")
	}
	if strings.HasPrefix(expr, "@every") {
		return nil, invalid("schedule.cron", "use schedule.every instead of @every")
	}
	if zone == "" {
		zone = "UTC"
	}
	loc, err := time.LoadLocation(zone)
	if err != nil || zone == "Local" {
		return nil, &Error{Code: "unknown_timezone", Field: "schedule.timezone", Message: fmt.Sprintf("%q is not an IANA time zone name", zone)}
	}
	parsed, err := parser.Parse(expr)
	if err != nil {
		return nil, invalid("schedule.cron", "%q: %v", expr, err)
	}
	spec, ok := parsed.(*cron.SpecSchedule)
	if !ok {
		return nil, invalid("schedule.cron", "%q is not supported", expr)
	}
	spec.Location = loc
	return cronSchedule{spec: spec, loc: loc, hourWildcard: spec.Hour&starBit != 0}, nil
}

// starBit is how robfig/cron marks a field written as "*".
const starBit = 1 << 63

type cronSchedule struct {
	spec         *cron.SpecSchedule
	loc          *time.Location
	hourWildcard bool
}

func (c cronSchedule) Kind() Kind { return KindCron }

func (c cronSchedule) Next(t time.Time) time.Time {
	n := c.spec.Next(t)
	if n.IsZero() || c.hourWildcard {
		return n.UTC()
	}
	if g := c.gapOccurrence(t, n); !g.IsZero() {
		return g
	}
	// A wall time repeated by a fall-back fires at its first instance only. Two repeats at
	// most can follow each other (e.g. 02:00 and 02:30 both fall in the repeated hour).
	for guard := 0; guard < 1000 && !n.IsZero() && c.isRepeat(n); guard++ {
		n = c.spec.Next(n)
	}
	return n.UTC()
}

// gapOccurrence returns the end of a spring-forward gap between t and n when the schedule has a
// wall time inside that gap (a time robfig/cron would skip), else zero.
func (c cronSchedule) gapOccurrence(t, n time.Time) time.Time {
	_, offT := t.In(c.loc).Zone()
	_, offN := n.In(c.loc).Zone()
	if offN <= offT {
		return time.Time{}
	}
	// Find the transition instant: the first second whose offset is no longer offT.
	lo, hi := t.Unix(), n.Unix()
	for lo+1 < hi {
		mid := lo + (hi-lo)/2
		if _, off := time.Unix(mid, 0).In(c.loc).Zone(); off == offT {
			lo = mid
		} else {
			hi = mid
		}
	}
	transition := time.Unix(hi, 0)
	// Evaluate the schedule as if the old offset went on: a match in [transition, transition +
	// gap) is a wall time that does not exist.
	fixed := *c.spec
	fixed.Location = time.FixedZone("", offT)
	m := fixed.Next(t)
	gap := time.Duration(offN-offT) * time.Second
	if !m.IsZero() && !m.Before(transition) && m.Before(transition.Add(gap)) && transition.After(t) {
		return transition.UTC()
	}
	return time.Time{}
}

// isRepeat reports whether n is the second instance of a wall time that a fall-back repeated.
func (c cronSchedule) isRepeat(n time.Time) bool {
	_, offN := n.In(c.loc).Zone()
	_, offBefore := n.Add(-24 * time.Hour).In(c.loc).Zone()
	if offBefore <= offN {
		return false
	}
	first := n.Add(-time.Duration(offBefore-offN) * time.Second)
	const wall = "2006-01-02T15:04:05"
	return first.In(c.loc).Format(wall) == n.In(c.loc).Format(wall)
}

type every struct {
	period time.Duration
	anchor time.Time
}

func (e every) Kind() Kind { return KindEvery }

func (e every) Next(t time.Time) time.Time {
	if t.Before(e.anchor) {
		return e.anchor.Add(e.period).UTC()
	}
	k := t.Sub(e.anchor)/e.period + 1
	return e.anchor.Add(k * e.period).UTC()
}

type at struct{ t time.Time }

func (a at) Kind() Kind { return KindAt }

func (a at) Next(t time.Time) time.Time {
	if t.Before(a.t) {
		return a.t
	}
	return time.Time{}
}

// Occurrences returns the occurrences in [from, to), at most limit of them.
func Occurrences(s Schedule, from, to time.Time, limit int) []time.Time {
	var out []time.Time
	for t := s.Next(from.Add(-time.Millisecond)); !t.IsZero() && t.Before(to) && len(out) < limit; t = s.Next(t) {
		out = append(out, t)
	}
	return out
}

// Has reports whether t is an occurrence of s: the check that keeps an occurrence stamped for
// an older definition of a timer from firing.
func Has(s Schedule, t time.Time) bool {
	return s.Next(t.Add(-time.Millisecond)).Equal(t)
}

// FormatTime renders t as RFC 3339 UTC with exactly three fractional digits and Z, the one
// time format of the API and the callback headers.
func FormatTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }
