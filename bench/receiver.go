package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// delivery is one callback as the receiver saw it.
type delivery struct {
	TimerID int64
	SchedMS int64
	// ArrivalNS is the arrival in Unix nanoseconds on the receiver's clock: the wall clock
	// read once at start plus the monotonic time elapsed since, so a wall-clock step during
	// the run does not distort lateness.
	ArrivalNS int64
	Attempt   int32
	// Status is what the receiver answered: 200, or 500 on purpose for a failing path.
	Status int16
	// BadHeader: no parsable Idempotency-Key, or Tock-Scheduled-At disagrees with it.
	BadHeader bool
}

func (d delivery) key() occKey { return occKey{ID: d.TimerID, MS: d.SchedMS} }

func (d delivery) ok() bool { return d.Status >= 200 && d.Status < 300 }

// occKey is one occurrence: the parts of its Idempotency-Key.
type occKey struct {
	ID int64
	MS int64
}

// receiver is the callback endpoint of a run. Path /cb answers 200; /fail/N answers 500 to
// attempts 1..N (from Tock-Attempt) and 200 after, so retries are exercised.
type receiver struct {
	srv   *http.Server
	ln    net.Listener
	base  string // what timers' callback URLs start with
	epoch time.Time
	done  chan struct{}
	// serveErr is why Serve ended by itself (a broken listener); read after done.
	serveErr error

	mu  sync.Mutex
	got []delivery
}

// startReceiver listens on addr (e.g. 127.0.0.1:0). publicBase, when set, replaces
// http://<listen address> in callback URLs (a receiver reachable from remote tock nodes).
func startReceiver(addr, publicBase string) (*receiver, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("bench: receiver listen on %s: %w", addr, err)
	}
	r := &receiver{ln: ln, epoch: time.Now(), done: make(chan struct{}), got: make([]delivery, 0, 1<<16)}
	r.base = "http://" + ln.Addr().String()
	if publicBase != "" {
		r.base = strings.TrimRight(publicBase, "/")
	}
	r.srv = &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	go func() {
		defer close(r.done)
		if err := r.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			r.serveErr = err
		}
	}()
	return r, nil
}

// now is the receiver's clock (see delivery.ArrivalNS).
func (r *receiver) now() time.Time { return r.epoch.Add(time.Since(r.epoch)) }

func (r *receiver) okURL() string { return r.base + "/cb" }

func (r *receiver) failURL(n int) string { return fmt.Sprintf("%s/fail/%d", r.base, n) }

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	arrived := r.now().UnixNano()
	_, _ = io.Copy(io.Discard, req.Body)
	d := delivery{ArrivalNS: arrived, Status: http.StatusOK}
	var ok bool
	d.TimerID, d.SchedMS, ok = parseKey(req.Header.Get("Idempotency-Key"))
	if !ok {
		d.BadHeader = true
		d.TimerID, _ = strconv.ParseInt(req.Header.Get("Tock-Timer-Id"), 10, 64)
		if t, err := time.Parse(time.RFC3339Nano, req.Header.Get("Tock-Scheduled-At")); err == nil {
			d.SchedMS = t.UnixMilli()
		}
	} else if t, err := time.Parse(time.RFC3339Nano, req.Header.Get("Tock-Scheduled-At")); err != nil || t.UnixMilli() != d.SchedMS {
		d.BadHeader = true
	}
	attempt, _ := strconv.Atoi(req.Header.Get("Tock-Attempt"))
	d.Attempt = int32(attempt)
	if n, isFail := failAttempts(req.URL.Path); isFail && attempt <= n {
		d.Status = http.StatusInternalServerError
	}
	r.mu.Lock()
	r.got = append(r.got, d)
	r.mu.Unlock()
	w.WriteHeader(int(d.Status))
}

// parseKey splits an Idempotency-Key "<timer_id>:<scheduled unix ms>".
func parseKey(k string) (id, ms int64, ok bool) {
	a, b, found := strings.Cut(k, ":")
	if !found {
		return 0, 0, false
	}
	id, err1 := strconv.ParseInt(a, 10, 64)
	ms, err2 := strconv.ParseInt(b, 10, 64)
	return id, ms, err1 == nil && err2 == nil && id > 0
}

// failAttempts reads N from a /fail/N path.
func failAttempts(path string) (int, bool) {
	rest, found := strings.CutPrefix(path, "/fail/")
	if !found {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	return n, err == nil
}

// since returns the deliveries recorded from index from on, and the index to continue at.
func (r *receiver) since(from int) ([]delivery, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if from >= len(r.got) {
		return nil, len(r.got)
	}
	out := make([]delivery, len(r.got)-from)
	copy(out, r.got[from:])
	return out, len(r.got)
}

// all returns every delivery so far.
func (r *receiver) all() []delivery {
	ds, _ := r.since(0)
	return ds
}

// close stops the receiver; its error says whether it had stopped serving by itself.
func (r *receiver) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = r.srv.Shutdown(ctx)
	<-r.done
	if r.serveErr != nil {
		return fmt.Errorf("bench: receiver stopped serving: %w", r.serveErr)
	}
	return nil
}

// watcher follows the receiver until a set of occurrences has each been answered with a 2xx.
type watcher struct {
	r      *receiver
	want   map[occKey]struct{}
	got    map[occKey]struct{}
	cursor int
}

func (r *receiver) watch(want map[occKey]struct{}) *watcher {
	return &watcher{r: r, want: want, got: make(map[occKey]struct{}, len(want))}
}

// poll consumes new deliveries and returns how many wanted occurrences have arrived.
func (w *watcher) poll() int {
	ds, next := w.r.since(w.cursor)
	w.cursor = next
	for _, d := range ds {
		if !d.ok() {
			continue
		}
		k := d.key()
		if _, ok := w.want[k]; ok {
			w.got[k] = struct{}{}
		}
	}
	return len(w.got)
}

// waitAll waits until every wanted occurrence arrived, or until grace has passed after
// windowEnd. With extend, the wait goes on while arrivals still progress (a backlog draining
// is late, not missed) until grace passes without progress. It never waits past hardStop,
// and returns early when ctx ends. It reports whether everything arrived.
func (w *watcher) waitAll(ctx context.Context, windowEnd time.Time, grace time.Duration, extend bool, hardStop time.Time) bool {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	last, lastProgress := -1, w.r.now()
	for {
		n := w.poll()
		if n >= len(w.want) {
			return true
		}
		now := w.r.now()
		if n > last {
			last, lastProgress = n, now
		}
		deadline := windowEnd.Add(grace)
		if extend && lastProgress.Add(grace).After(deadline) {
			deadline = lastProgress.Add(grace)
		}
		if now.After(deadline) || now.After(hardStop) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
}
