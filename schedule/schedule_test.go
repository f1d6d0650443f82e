package schedule

import (
	"errors"
	"testing"
	"time"
)

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

var jan1 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestCronSequences(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, cron, zone, from string
		want                   []string // UTC
	}{
		{"FiveFieldUTC", "*/15 * * * *", "", "2026-11-21T09:00:00Z",
			[]string{"2026-11-21T09:00:00Z", "2026-11-21T09:15:00Z", "2026-11-21T09:30:00Z"}},
		{"SixFieldSeconds", "*/20 * * * * *", "UTC", "2026-11-21T09:00:00.5Z",
			[]string{"2026-11-21T09:00:20Z", "2026-11-21T09:00:40Z", "2026-11-21T09:01:00Z"}},
		{"Descriptor", "@daily", "Asia/Tokyo", "2026-11-21T00:00:00Z",
			[]string{"2026-11-21T15:00:00Z", "2026-11-22T15:00:00Z"}},
		{"BerlinSpringForwardFixedHourFiresAtGapEnd", "30 2 * * *", "Europe/Berlin", "2026-03-27T12:00:00Z",
			[]string{"2026-03-28T01:30:00Z", "2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"}},
		{"BerlinFallBackFixedHourFiresOnce", "30 2 * * *", "Europe/Berlin", "2026-10-24T12:00:00Z",
			[]string{"2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z", "2026-10-27T01:30:00Z"}},
		{"BerlinSpringForwardHourlyFollowsRealHours", "0 * * * *", "Europe/Berlin", "2026-03-29T00:00:00Z",
			// 01:00+01, 03:00+02, 04:00+02: local 02:00 does not exist.
			[]string{"2026-03-29T00:00:00Z", "2026-03-29T01:00:00Z", "2026-03-29T02:00:00Z"}},
		{"BerlinFallBackHourlyFiresBothHours", "30 * * * *", "Europe/Berlin", "2026-10-25T00:00:00Z",
			[]string{"2026-10-25T00:30:00Z", "2026-10-25T01:30:00Z", "2026-10-25T02:30:00Z"}},
		{"NewYorkDailyKeepsLocalTimeAcrossDST", "0 0 9 * * *", "America/New_York", "2026-03-07T00:00:00Z",
			[]string{"2026-03-07T14:00:00Z", "2026-03-08T13:00:00Z", "2026-03-09T13:00:00Z"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			spec, err := Normalize(Spec{Cron: tc.cron, Timezone: tc.zone}, jan1)
			if err != nil {
				t.Fatal(err)
			}
			s, err := Parse(spec, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			got := Occurrences(s, mustTime(t, tc.from), mustTime(t, tc.from).Add(365*24*time.Hour), len(tc.want))
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for i, w := range tc.want {
				if !got[i].Equal(mustTime(t, w)) {
					t.Fatalf("occurrence %d = %s, want %s (all: %v)", i, got[i].Format(time.RFC3339), w, got)
				}
				if !Has(s, got[i]) {
					t.Fatalf("Has(%s) = false for an occurrence", got[i])
				}
			}
			if Has(s, got[0].Add(time.Millisecond)) {
				t.Fatalf("Has accepted a time that is not an occurrence")
			}
		})
	}
}

func TestEveryCountsFromAnchorWithoutDrift(t *testing.T) {
	t.Parallel()
	anchor := mustTime(t, "2026-11-21T09:00:00.250Z")
	s, err := Parse(Spec{Every: "1500ms"}, anchor)
	if err != nil {
		t.Fatal(err)
	}
	got := Occurrences(s, anchor, anchor.Add(5*time.Second), 10)
	want := []string{"2026-11-21T09:00:01.750Z", "2026-11-21T09:00:03.250Z", "2026-11-21T09:00:04.750Z"}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for i := range want {
		if FormatTime(got[i]) != want[i] {
			t.Fatalf("occurrence %d = %s, want %s", i, FormatTime(got[i]), want[i])
		}
	}
	// Far in the future the phase is unchanged: occurrence k is anchor + k*period exactly.
	far := s.Next(anchor.Add(1000*time.Hour + 1))
	if far.Sub(anchor)%(1500*time.Millisecond) != 0 {
		t.Fatalf("drifted: %s", far)
	}
	if !Has(s, far) || Has(s, far.Add(-time.Millisecond)) {
		t.Fatal("Has disagrees with Next")
	}
}

func TestAtAndIn(t *testing.T) {
	t.Parallel()
	now := mustTime(t, "2026-11-21T09:00:00.123456Z")
	spec, err := Normalize(Spec{In: "30m"}, now)
	if err != nil {
		t.Fatal(err)
	}
	if spec.At != "2026-11-21T09:30:00.123Z" || spec.In != "" {
		t.Fatalf("in normalized to %+v", spec)
	}
	// A past "at" is accepted: it fires at once.
	past, err := Normalize(Spec{At: "2026-11-21T08:00:00+01:00"}, now)
	if err != nil {
		t.Fatal(err)
	}
	if past.At != "2026-11-21T07:00:00.000Z" {
		t.Fatalf("at normalized to %q", past.At)
	}
	s, _ := Parse(past, time.Time{})
	if got := s.Next(time.Time{}); FormatTime(got) != past.At {
		t.Fatalf("next = %s", got)
	}
	if !s.Next(mustTime(t, past.At)).IsZero() {
		t.Fatal("a one-shot must have a single occurrence")
	}
}

func TestNormalizeErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		spec  Spec
		code  string
		field string
	}{
		{"Empty", Spec{}, "invalid_schedule", "schedule"},
		{"TwoKinds", Spec{Cron: "* * * * *", Every: "1s"}, "invalid_schedule", "schedule"},
		{"BadCron", Spec{Cron: "61 * * * *"}, "invalid_schedule", "schedule.cron"},
		{"TooManyFields", Spec{Cron: "* * * * * * *"}, "invalid_schedule", "schedule.cron"},
		{"CronEvery", Spec{Cron: "@every 5s"}, "invalid_schedule", "schedule.cron"},
		{"CronTZPrefix", Spec{Cron: "CRON_TZ=UTC * * * * *"}, "invalid_schedule", "schedule.cron"},
		{"UnknownZone", Spec{Cron: "* * * * *", Timezone: "Mars/Olympus"}, "unknown_timezone", "schedule.timezone"},
		{"LocalZone", Spec{Cron: "* * * * *", Timezone: "Local"}, "unknown_timezone", "schedule.timezone"},
		{"ZoneWithoutCron", Spec{Every: "5s", Timezone: "UTC"}, "invalid_schedule", "schedule.timezone"},
		{"NeverFires", Spec{Cron: "0 0 30 2 *"}, "schedule_never_fires", "schedule.cron"},
		{"EveryTooShort", Spec{Every: "999ms"}, "invalid_schedule", "schedule.every"},
		{"EveryNotDuration", Spec{Every: "often"}, "invalid_schedule", "schedule.every"},
		{"EverySubMillisecond", Spec{Every: "1s1us"}, "invalid_schedule", "schedule.every"},
		{"AtNotRFC3339", Spec{At: "tomorrow"}, "invalid_schedule", "schedule.at"},
		{"InNegative", Spec{In: "-5m"}, "invalid_schedule", "schedule.in"},
		{"InTooFar", Spec{In: "1000000h"}, "invalid_schedule", "schedule.in"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Normalize(tc.spec, jan1)
			var se *Error
			if !errors.As(err, &se) {
				t.Fatalf("err = %v, want *Error", err)
			}
			if se.Code != tc.code || se.Field != tc.field {
				t.Fatalf("got %s/%s (%s), want %s/%s", se.Code, se.Field, se.Message, tc.code, tc.field)
			}
		})
	}
}

func FuzzSchedule(f *testing.F) {
	for _, s := range []Spec{
		{Cron: "*/5 * * * * *"}, {Cron: "30 2 * * *", Timezone: "Europe/Berlin"}, {Cron: "@hourly"},
		{Every: "1s"}, {Every: "90m"}, {At: "2026-11-21T09:00:00Z"}, {In: "30m"}, {Cron: "0 0 29 2 *", Timezone: "America/New_York"},
	} {
		f.Add(s.Cron, s.Timezone, s.Every, s.At, s.In)
	}
	f.Fuzz(func(t *testing.T, cron, zone, every, at, in string) {
		spec, err := Normalize(Spec{Cron: cron, Timezone: zone, Every: every, At: at, In: in}, jan1)
		if err != nil {
			var se *Error
			if !errors.As(err, &se) || se.Code == "" || se.Field == "" {
				t.Fatalf("error without code/field: %v", err)
			}
			return
		}
		s, err := Parse(spec, jan1)
		if err != nil {
			t.Fatalf("normalized spec %+v does not parse: %v", spec, err)
		}
		prev := time.Time{}
		for _, o := range Occurrences(s, jan1, jan1.Add(48*time.Hour), 50) {
			if !o.After(prev) {
				t.Fatalf("occurrences not increasing: %s after %s", o, prev)
			}
			prev = o
		}
	})
}
