package bench

import (
	"fmt"
	"sort"
	"time"

	"github.com/tockd/tock/schedule"
)

// planned is one timer the run created and what it expects of it.
type planned struct {
	ID    int64
	Kind  string
	Spec  schedule.Spec
	Sched schedule.Schedule
}

// newPlanned rebuilds a created timer's schedule from the API's answer. An "every"
// schedule counts from its anchor (occurrence k is anchor + k·period); the API does not
// return the anchor but next_fire_at is one of those occurrences, which fixes the phase.
func newPlanned(kind string, tr timerResponse) (*planned, error) {
	spec := tr.Schedule
	var anchor time.Time
	if spec.Every != "" {
		period, err := time.ParseDuration(spec.Every)
		if err != nil {
			return nil, fmt.Errorf("bench: timer %d: every %q: %w", tr.ID, spec.Every, err)
		}
		if tr.NextFireAt == nil {
			return nil, fmt.Errorf("bench: timer %d (every %s) has no next_fire_at", tr.ID, spec.Every)
		}
		next, err := time.Parse(time.RFC3339Nano, *tr.NextFireAt)
		if err != nil {
			return nil, fmt.Errorf("bench: timer %d next_fire_at %q: %w", tr.ID, *tr.NextFireAt, err)
		}
		anchor = next.Add(-period)
	}
	s, err := schedule.Parse(spec, anchor)
	if err != nil {
		return nil, fmt.Errorf("bench: timer %d schedule %+v: %w", tr.ID, spec, err)
	}
	return &planned{ID: tr.ID, Kind: kind, Spec: spec, Sched: s}, nil
}

// expectedIn returns every occurrence of the timers in [from, to).
func expectedIn(ts []*planned, from, to time.Time) map[occKey]*planned {
	out := map[occKey]*planned{}
	// Every schedule fires at most once a second (every >= 1s, cron has whole seconds).
	limit := int(to.Sub(from)/time.Second) + 2
	for _, p := range ts {
		for _, t := range schedule.Occurrences(p.Sched, from, to, limit) {
			out[occKey{ID: p.ID, MS: t.UnixMilli()}] = p
		}
	}
	return out
}

// tally is the outcome for one kind of timer.
type tally struct {
	Counts
	timers int
	// first: lateness in ms of each occurrence's first arrival (any attempt); ok: of its
	// first 2xx-answered arrival.
	first, ok []float64
	// firstNS and lastOKNS bound the arrivals (Unix ns), for the burst report.
	firstNS, lastOKNS int64
}

type occState struct {
	p                 *planned
	firstNS, firstOK  int64
	okCount, failures int
}

// analyze matches deliveries against the expected occurrences of the timers ts. inWindow
// says which scheduled times the measurement covers: a delivery of one of the run's timers
// (ours) scheduled there but not expected is unexpected; deliveries scheduled elsewhere are
// ignored. The result has one tally per kind and the total under "".
func analyze(ts []*planned, exp map[occKey]*planned, ours map[int64]*planned, ds []delivery, inWindow func(ms int64) bool) map[string]*tally {
	out := map[string]*tally{"": {}}
	get := func(kind string) *tally {
		t := out[kind]
		if t == nil {
			t = &tally{}
			out[kind] = t
		}
		return t
	}
	for _, p := range ts {
		get(p.Kind).timers++
	}
	states := make(map[occKey]*occState, len(exp))
	for k, p := range exp {
		states[k] = &occState{p: p}
		get(p.Kind).Expected++
	}
	for _, d := range ds {
		p := ours[d.TimerID]
		if p == nil || !inWindow(d.SchedMS) {
			continue
		}
		t := get(p.Kind)
		if d.BadHeader {
			t.BadHeaders++
		}
		if d.ArrivalNS < d.SchedMS*int64(time.Millisecond) {
			t.Early++
		}
		if !d.ok() {
			t.Failed++
		}
		st := states[d.key()]
		if st == nil {
			t.Unexpected++
			continue
		}
		if st.firstNS == 0 || d.ArrivalNS < st.firstNS {
			st.firstNS = d.ArrivalNS
		}
		if d.ok() {
			st.okCount++
			if st.firstOK == 0 || d.ArrivalNS < st.firstOK {
				st.firstOK = d.ArrivalNS
			}
		} else {
			st.failures++
		}
	}
	for k, st := range states {
		t := get(st.p.Kind)
		schedNS := k.MS * int64(time.Millisecond)
		if st.firstNS != 0 {
			t.first = append(t.first, float64(st.firstNS-schedNS)/1e6)
			if t.firstNS == 0 || st.firstNS < t.firstNS {
				t.firstNS = st.firstNS
			}
		}
		if st.okCount == 0 {
			t.Missed++
			continue
		}
		t.Delivered++
		t.Duplicates += st.okCount - 1
		t.ok = append(t.ok, float64(st.firstOK-schedNS)/1e6)
		t.lastOKNS = max(t.lastOKNS, st.firstOK)
	}
	total := out[""]
	kinds := make([]string, 0, len(out))
	for k := range out {
		if k != "" {
			kinds = append(kinds, k)
		}
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		t := out[k]
		total.Counts.add(t.Counts)
		total.timers += t.timers
		total.first = append(total.first, t.first...)
		total.ok = append(total.ok, t.ok...)
		if t.firstNS != 0 && (total.firstNS == 0 || t.firstNS < total.firstNS) {
			total.firstNS = t.firstNS
		}
		total.lastOKNS = max(total.lastOKNS, t.lastOKNS)
	}
	return out
}

// earlyAnywhere counts deliveries of the run's timers that arrived before their scheduled
// time, whatever the window.
func earlyAnywhere(ours map[int64]*planned, ds []delivery) int {
	n := 0
	for _, d := range ds {
		if ours[d.TimerID] != nil && d.ArrivalNS < d.SchedMS*int64(time.Millisecond) {
			n++
		}
	}
	return n
}

func badHeaders(ds []delivery) int {
	n := 0
	for _, d := range ds {
		if d.BadHeader {
			n++
		}
	}
	return n
}

// kindResults turns per-kind tallies into report rows, in a stable order.
func kindResults(ts map[string]*tally) []KindResult {
	var out []KindResult
	for kind, t := range ts {
		if kind == "" {
			continue
		}
		k := KindResult{Kind: kind, Timers: t.timers, Counts: t.Counts, Lateness: computeStats(t.first)}
		if t.Failed > 0 {
			s := computeStats(t.ok)
			k.LatenessDelivered = &s
		}
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Kind < out[j].Kind })
	return out
}
