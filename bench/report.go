package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Stats summarizes lateness samples in milliseconds. Percentiles are exact (nearest rank
// over all samples).
type Stats struct {
	N    int     `json:"n"`
	Min  float64 `json:"min_ms"`
	Mean float64 `json:"mean_ms"`
	P50  float64 `json:"p50_ms"`
	P90  float64 `json:"p90_ms"`
	P99  float64 `json:"p99_ms"`
	P999 float64 `json:"p99_9_ms"`
	Max  float64 `json:"max_ms"`
}

// computeStats sorts samples in place and summarizes them.
func computeStats(samples []float64) Stats {
	if len(samples) == 0 {
		return Stats{}
	}
	slices.Sort(samples)
	sum := 0.0
	for _, v := range samples {
		sum += v
	}
	return Stats{
		N: len(samples), Min: round3(samples[0]), Mean: round3(sum / float64(len(samples))),
		P50: round3(percentile(samples, 0.50)), P90: round3(percentile(samples, 0.90)),
		P99: round3(percentile(samples, 0.99)), P999: round3(percentile(samples, 0.999)),
		Max: round3(samples[len(samples)-1]),
	}
}

// percentile is the nearest-rank percentile of sorted samples: the smallest sample with at
// least p of all samples at or below it.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(0, min(rank, len(sorted)-1))]
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

// Counts are the delivery outcomes of a set of expected occurrences.
type Counts struct {
	Expected  int `json:"expected"`
	Delivered int `json:"delivered"`
	Missed    int `json:"missed"`
	Early     int `json:"early"`
	// Duplicates: 2xx-answered deliveries of an occurrence beyond its first.
	Duplicates int `json:"duplicates"`
	// Failed: deliveries the receiver answered 500 on purpose (mixed workload's failing share).
	Failed int `json:"failed"`
	// Unexpected: deliveries of the run's timers, scheduled in the window, at a time that is
	// not an occurrence of their schedule.
	Unexpected int `json:"unexpected"`
	BadHeaders int `json:"bad_headers"`
}

func (c *Counts) add(o Counts) {
	c.Expected += o.Expected
	c.Delivered += o.Delivered
	c.Missed += o.Missed
	c.Early += o.Early
	c.Duplicates += o.Duplicates
	c.Failed += o.Failed
	c.Unexpected += o.Unexpected
	c.BadHeaders += o.BadHeaders
}

// KindResult is one kind of timer in the mixed workload.
type KindResult struct {
	Kind   string `json:"kind"`
	Timers int    `json:"timers"`
	Counts
	// Lateness is of each occurrence's first arrival (any attempt).
	Lateness Stats `json:"lateness"`
	// LatenessDelivered is of the 2xx-answered arrival, when it differs (retried kinds).
	LatenessDelivered *Stats `json:"lateness_delivered,omitempty"`
}

// StepResult is one step of the ramp workload.
type StepResult struct {
	Step        int     `json:"step"`
	TargetRate  float64 `json:"target_fires_per_s"`
	Timers      int     `json:"timers"`
	Created     int     `json:"created_this_step"`
	CreateRate  float64 `json:"created_per_s"`
	WindowStart string  `json:"window_start"`
	WindowSecs  float64 `json:"window_s"`
	FiresPerSec float64 `json:"fires_per_s"`
	Counts
	Lateness  Stats      `json:"lateness"`
	Resources *Resources `json:"resources,omitempty"`
	Passed    bool       `json:"passed"`
	Verdict   string     `json:"verdict"`
}

// BurstResult is the burst workload's timing.
type BurstResult struct {
	DueAt string `json:"due_at"`
	// CreationMarginMS is due time minus the end of creation (negative: creation overran).
	CreationMarginMS float64 `json:"creation_margin_ms"`
	FirstArrivalMS   float64 `json:"first_arrival_ms"`
	LastArrivalMS    float64 `json:"last_arrival_ms"`
	// DrainFiresPerSec is delivered over (last arrival - due).
	DrainFiresPerSec float64 `json:"drain_fires_per_s"`
}

// NodeResources is one tock process's CPU and memory over the measurement.
type NodeResources struct {
	URL            string  `json:"url"`
	CPUSeconds     float64 `json:"cpu_s"`
	RSSBeforeBytes float64 `json:"rss_before_bytes"`
	RSSAfterBytes  float64 `json:"rss_after_bytes"`
}

// Resources are what the target used over the measurement window.
type Resources struct {
	Seconds    float64         `json:"seconds"`
	CPUSeconds float64         `json:"cpu_s"`
	CPUMsFire  float64         `json:"cpu_ms_per_fire"`
	CPUCores   float64         `json:"cpu_cores"`
	Nodes      []NodeResources `json:"nodes,omitempty"`
	// MySQL: deltas of SHOW GLOBAL STATUS (server-wide: anything else on the server counts).
	MySQLQuestions     *int64             `json:"mysql_questions,omitempty"`
	MySQLQuestionsFire *float64           `json:"mysql_questions_per_fire,omitempty"`
	MySQLCom           map[string]int64   `json:"mysql_com,omitempty"`
	MySQLComPerFire    map[string]float64 `json:"mysql_com_per_fire,omitempty"`
	RedisCommands      *int64             `json:"redis_commands,omitempty"`
	RedisCommandsFire  *float64           `json:"redis_commands_per_fire,omitempty"`
	Note               string             `json:"note,omitempty"`
	// cpuOK: every node's CPU was read before and after.
	cpuOK bool
}

// resources turns two snapshots into per-fire figures.
func resources(before, after snapshot, bases []string, fires int, inProcess bool) *Resources {
	r := &Resources{Seconds: round3(after.At.Sub(before.At).Seconds())}
	if inProcess {
		r.Note = "embedded: CPU and RSS are the bench process's own (tock plus the bench's receiver and API client)"
	}
	r.cpuOK = len(before.Nodes) == len(after.Nodes) && len(after.Nodes) > 0
	for i := range after.Nodes {
		if i >= len(before.Nodes) || !before.Nodes[i].OK || !after.Nodes[i].OK {
			r.cpuOK = false
			continue
		}
		n := NodeResources{URL: bases[i], CPUSeconds: round3(after.Nodes[i].CPUSeconds - before.Nodes[i].CPUSeconds),
			RSSBeforeBytes: before.Nodes[i].RSSBytes, RSSAfterBytes: after.Nodes[i].RSSBytes}
		r.Nodes = append(r.Nodes, n)
		r.CPUSeconds += n.CPUSeconds
	}
	r.CPUSeconds = round3(r.CPUSeconds)
	if r.Seconds > 0 {
		r.CPUCores = round3(r.CPUSeconds / r.Seconds)
	}
	if fires > 0 {
		r.CPUMsFire = round3(r.CPUSeconds * 1000 / float64(fires))
	}
	if before.MySQL != nil && after.MySQL != nil {
		q := after.MySQL["Questions"] - before.MySQL["Questions"]
		r.MySQLQuestions = &q
		r.MySQLCom, r.MySQLComPerFire = map[string]int64{}, map[string]float64{}
		for k, v := range after.MySQL {
			if d := v - before.MySQL[k]; d > 0 && k != "Questions" {
				r.MySQLCom[k] = d
				if fires > 0 {
					r.MySQLComPerFire[k] = round3(float64(d) / float64(fires))
				}
			}
		}
		if fires > 0 {
			pf := round3(float64(q) / float64(fires))
			r.MySQLQuestionsFire = &pf
		}
	}
	if before.RedisOK && after.RedisOK {
		d := after.Redis - before.Redis
		r.RedisCommands = &d
		if fires > 0 {
			pf := round3(float64(d) / float64(fires))
			r.RedisCommandsFire = &pf
		}
	}
	return r
}

// Report is the outcome of one run.
type Report struct {
	Workload   string         `json:"workload"`
	Params     map[string]any `json:"params"`
	Target     TargetInfo     `json:"target"`
	StartedAt  string         `json:"started_at"`
	FinishedAt string         `json:"finished_at"`
	Host       HostInfo       `json:"host"`

	TimersCreated  int     `json:"timers_created"`
	CreateSeconds  float64 `json:"create_s"`
	CreatedPerSec  float64 `json:"created_per_s"`
	WindowStart    string  `json:"window_start"`
	WindowSeconds  float64 `json:"window_s"`
	FiresPerSecond float64 `json:"fires_per_s"`
	Counts
	// EarlyAnywhere counts early arrivals of the run's timers at any time, not only in the
	// window (Early counts the window's).
	EarlyAnywhere int        `json:"early_anywhere"`
	Lateness      Stats      `json:"lateness"`
	Resources     *Resources `json:"resources,omitempty"`

	Kinds []KindResult `json:"kinds,omitempty"`
	Steps []StepResult `json:"steps,omitempty"`
	// MaxSustainedRate is the ramp's highest step rate that passed (fires/s).
	MaxSustainedRate float64      `json:"max_sustained_fires_per_s,omitempty"`
	StopReason       string       `json:"stop_reason,omitempty"`
	Burst            *BurstResult `json:"burst,omitempty"`

	CleanupMethod  string  `json:"cleanup_method,omitempty"`
	CleanupSeconds float64 `json:"cleanup_s"`
	CleanupError   string  `json:"cleanup_error,omitempty"`

	Notes []string `json:"notes,omitempty"`
	// Pass: no early arrival and nothing missed.
	Pass bool `json:"pass"`
}

// HostInfo is where the bench ran.
type HostInfo struct {
	Hostname string `json:"hostname"`
	CPUs     int    `json:"cpus"`
	GoOS     string `json:"goos"`
	GoArch   string `json:"goarch"`
	// LoadAvg and LoadAvgEnd are /proc/loadavg (1, 5, 15 min) at the start and the end,
	// when readable: the machine may be shared.
	LoadAvg    string `json:"loadavg,omitempty"`
	LoadAvgEnd string `json:"loadavg_end,omitempty"`
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("bench: encode report: %w", err)
	}
	return nil
}

// SaveJSON writes the report to path.
func (r *Report) SaveJSON(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("bench: create %s: %w", path, err)
	}
	if err := r.WriteJSON(f); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("bench: write %s: %w", path, err)
	}
	return nil
}

// FileName is <workload>-<target>-<yyyymmdd-hhmmss>.json, from the start time.
func (r *Report) FileName() string {
	t, err := time.Parse(time.RFC3339Nano, r.StartedAt)
	if err != nil {
		t = time.Now()
	}
	return fmt.Sprintf("%s-%s-%s.json", r.Workload, r.Target.Name(), t.UTC().Format("20060102-150405"))
}

// SaveIn writes the report into dir under FileName and returns the path.
func (r *Report) SaveIn(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("bench: create %s: %w", dir, err)
	}
	p := filepath.Join(dir, r.FileName())
	return p, r.SaveJSON(p)
}

// WriteTable prints the report for humans.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	p := func(format string, args ...any) { fmt.Fprintf(tw, format+"\n", args...) }
	p("tock bench\t%s  %s", r.Workload, paramLine(r.Params))
	t := r.Target
	desc := fmt.Sprintf("%s %s, store %s, index %s, migrate step %s / window %s", t.Mode, strings.Join(t.URLs, ","), t.Store, t.Index, t.MigrateStep, t.MigrateWindow)
	if t.PoolSize > 0 {
		desc += fmt.Sprintf(", pool %d, buckets %d", t.PoolSize, t.Buckets)
	}
	if t.Version != "" {
		desc += ", version " + t.Version
	}
	p("target\t%s", desc)
	p("host\t%s, %d CPUs, load %s at start, %s at end", r.Host.Hostname, r.Host.CPUs, r.Host.LoadAvg, r.Host.LoadAvgEnd)
	p("created\t%d timers in %.2fs = %.0f/s", r.TimersCreated, r.CreateSeconds, r.CreatedPerSec)
	if r.WindowStart != "" {
		p("window\t%s + %.1fs", r.WindowStart, r.WindowSeconds)
	}
	p("fires/s\t%.1f", r.FiresPerSecond)
	p("expected\t%d  delivered %d  missed %d  early %d (anywhere %d)  duplicates %d  failed %d  unexpected %d  bad headers %d",
		r.Expected, r.Delivered, r.Missed, r.Early, r.EarlyAnywhere, r.Duplicates, r.Failed, r.Unexpected, r.BadHeaders)
	if r.Burst != nil {
		b := r.Burst
		p("burst\tdue %s (creation ended %.0f ms before)  first arrival +%.1f ms  last arrival +%.1f ms  drain %.0f fires/s",
			b.DueAt, b.CreationMarginMS, b.FirstArrivalMS, b.LastArrivalMS, b.DrainFiresPerSec)
	}
	if r.Resources != nil {
		writeResources(p, r.Resources)
	}
	if r.CleanupMethod != "" || r.CleanupError != "" {
		p("cleanup\t%s in %.2fs %s", r.CleanupMethod, r.CleanupSeconds, r.CleanupError)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "lateness ms\tn\tmin\tp50\tp90\tp99\tp99.9\tmax\tmean\t")
	statsRow(tw, "all", r.Lateness)
	for _, k := range r.Kinds {
		statsRow(tw, k.Kind, k.Lateness)
		if k.LatenessDelivered != nil {
			statsRow(tw, k.Kind+" (2xx)", *k.LatenessDelivered)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Kinds) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "kind\ttimers\texpected\tdelivered\tmissed\tearly\tdup\tfailed\tunexpected\tp50\tp99\tmax\t")
		for _, k := range r.Kinds {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.1f\t%.1f\t%.1f\t\n", k.Kind, k.Timers, k.Expected, k.Delivered,
				k.Missed, k.Early, k.Duplicates, k.Failed, k.Unexpected, k.Lateness.P50, k.Lateness.P99, k.Lateness.Max)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(r.Steps) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "step\trate\ttimers\tcreated/s\tfires/s\texpected\tdelivered\tmissed\tearly\tp50\tp99\tmax\tcpu s\tverdict\t")
		for _, s := range r.Steps {
			cpu := "-"
			if s.Resources != nil && s.Resources.cpuOK {
				cpu = fmt.Sprintf("%.2f", s.Resources.CPUSeconds)
			}
			fmt.Fprintf(tw, "%d\t%.0f\t%d\t%.0f\t%.1f\t%d\t%d\t%d\t%d\t%.1f\t%.1f\t%.1f\t%s\t%s\t\n", s.Step, s.TargetRate, s.Timers, s.CreateRate,
				s.FiresPerSec, s.Expected, s.Delivered, s.Missed, s.Early, s.Lateness.P50, s.Lateness.P99, s.Lateness.Max, cpu, s.Verdict)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(w, "max sustained rate: %.0f fires/s (stopped: %s)\n", r.MaxSustainedRate, r.StopReason)
	}
	fmt.Fprintln(w)
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	verdict := "PASS"
	if !r.Pass {
		verdict = "FAIL (early arrivals or missed occurrences)"
	}
	_, err := fmt.Fprintf(w, "result: %s\n", verdict)
	return err
}

func writeResources(p func(string, ...any), res *Resources) {
	if res.cpuOK || len(res.Nodes) > 0 {
		var rss []string
		for _, n := range res.Nodes {
			rss = append(rss, fmt.Sprintf("%.0f->%.0f MB", n.RSSBeforeBytes/1e6, n.RSSAfterBytes/1e6))
		}
		p("tock cpu\t%.2f s over %.1f s (%.2f cores, %.3f ms/fire)  rss %s", res.CPUSeconds, res.Seconds, res.CPUCores, res.CPUMsFire, strings.Join(rss, ", "))
	} else {
		p("tock cpu\tunavailable (no process metrics at /metrics)")
	}
	if res.Note != "" {
		p("\t(%s)", res.Note)
	}
	if res.MySQLQuestions != nil {
		line := fmt.Sprintf("%d questions", *res.MySQLQuestions)
		if res.MySQLQuestionsFire != nil {
			line += fmt.Sprintf(" = %.2f/fire", *res.MySQLQuestionsFire)
		}
		p("mysql\t%s; %s (server-wide counters)", line, topCom(res.MySQLComPerFire, 6))
	}
	if res.RedisCommands != nil {
		line := fmt.Sprintf("%d commands", *res.RedisCommands)
		if res.RedisCommandsFire != nil {
			line += fmt.Sprintf(" = %.2f/fire", *res.RedisCommandsFire)
		}
		p("redis\t%s (server-wide counter)", line)
	}
}

// topCom lists the n largest Com_* per fire.
func topCom(m map[string]float64, n int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	var parts []string
	for i, k := range keys {
		if i == n {
			break
		}
		parts = append(parts, fmt.Sprintf("%s %.2f", strings.TrimPrefix(k, "Com_"), m[k]))
	}
	if len(parts) == 0 {
		return "no Com_* change"
	}
	return "per fire: " + strings.Join(parts, ", ")
}

func statsRow(w io.Writer, name string, s Stats) {
	fmt.Fprintf(w, "%s\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t\n", name, s.N, s.Min, s.P50, s.P90, s.P99, s.P999, s.Max, s.Mean)
}

func paramLine(p map[string]any) string {
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%v", k, p[k]))
	}
	return strings.Join(parts, " ")
}
