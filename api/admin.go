package api

import (
	"context"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/tockd/tock/compensator"
	"github.com/tockd/tock/schedule"
)

// Compensation is the part of *compensator.Compensator the admin endpoints use.
type Compensation interface {
	RunNow(ctx context.Context) (compensator.Report, error)
	Status() compensator.Status
}

var _ Compensation = (*compensator.Compensator)(nil)

// CompensationStatus is the JSON of GET /api/v1/admin/compensation.
type CompensationStatus struct {
	Instance  string `json:"instance"`
	StartedAt string `json:"started_at"`
	// Uptime and Interval are Go durations; UptimeMS and IntervalMS the same in milliseconds.
	Uptime     string  `json:"uptime"`
	UptimeMS   int64   `json:"uptime_ms"`
	Interval   string  `json:"interval"`
	IntervalMS int64   `json:"interval_ms"`
	NextPassAt *string `json:"next_pass_at"`
	// LastTakeoverAt is null when this instance has taken nothing over since it started.
	LastTakeoverAt *string `json:"last_takeover_at"`
	Passes         int     `json:"passes"`
	// LastPass is null before the first pass.
	LastPass *CompensationPass `json:"last_pass"`
}

// CompensationPass is the JSON of one pass, and the answer of POST .../compensation/run.
type CompensationPass struct {
	Kind       string `json:"kind"`
	At         string `json:"at"`
	DurationMS int64  `json:"duration_ms"`
	// Found is stuck + missing + deferred; zero makes the loop slow down.
	Found int `json:"found"`
	// Stuck executions and missing occurrences (no execution) found.
	Stuck   int `json:"stuck"`
	Missing int `json:"missing"`
	// Redriven through the executor; Missed recorded as missed (misfire policy or older
	// than the catch-up window).
	Redriven int `json:"redriven"`
	Missed   int `json:"missed"`
	// Outcomes of the re-driven occurrences.
	Succeeded  int `json:"succeeded"`
	Failed     int `json:"failed"`
	Skipped    int `json:"skipped"`
	Unrecorded int `json:"unrecorded"`
	// SlicesScanned were not recorded done and were recomputed; SlicesDone were recorded
	// done and not scanned; Deferred is left to the next pass by max_per_pass.
	SlicesScanned int    `json:"slices_scanned"`
	SlicesDone    int    `json:"slices_done"`
	Deferred      int    `json:"deferred"`
	Error         string `json:"error,omitempty"`
}

func (a *API) adminRoutes(v1 *gin.RouterGroup) {
	v1.GET("/admin/compensation", a.compensationStatus)
	v1.POST("/admin/compensation/run", a.runCompensation)
}

func (a *API) compensationOff(c *gin.Context) bool {
	if a.comp != nil {
		return false
	}
	a.fail(c, newError(codeNotFound, "", "compensation does not run on this instance (engine.disabled)"))
	return true
}

func (a *API) compensationStatus(c *gin.Context) {
	if a.compensationOff(c) {
		return
	}
	s := a.comp.Status()
	out := CompensationStatus{
		Instance:       s.InstanceID,
		StartedAt:      adminTime(s.StartedAt),
		Uptime:         s.Uptime.String(),
		UptimeMS:       s.Uptime.Milliseconds(),
		Interval:       s.Interval.String(),
		IntervalMS:     s.Interval.Milliseconds(),
		NextPassAt:     adminTimePtr(s.NextPassAt),
		LastTakeoverAt: adminTimePtr(s.LastTakeover),
		Passes:         s.Passes,
	}
	if s.LastPass != nil {
		p := passView(*s.LastPass)
		out.LastPass = &p
	}
	writeJSON(c, 200, out)
}

func (a *API) runCompensation(c *gin.Context) {
	if a.compensationOff(c) {
		return
	}
	rep, err := a.comp.RunNow(c.Request.Context())
	if err != nil && rep.At.IsZero() {
		a.fail(c, err)
		return
	}
	// A pass that failed halfway still answers what it did; Error says why it stopped.
	writeJSON(c, 200, passView(rep))
}

func passView(r compensator.Report) CompensationPass {
	return CompensationPass{
		Kind: r.Kind, At: adminTime(r.At), DurationMS: r.Duration.Milliseconds(), Found: r.Found(),
		Stuck: r.Stuck, Missing: r.Missing, Redriven: r.Redriven, Missed: r.Missed,
		Succeeded: r.Succeeded, Failed: r.Failed, Skipped: r.Skipped, Unrecorded: r.Unrecorded,
		SlicesScanned: r.SlicesScanned, SlicesDone: r.SlicesDone, Deferred: r.Deferred, Error: r.Err,
	}
}

func adminTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return schedule.FormatTime(t)
}

func adminTimePtr(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := schedule.FormatTime(t)
	return &s
}
