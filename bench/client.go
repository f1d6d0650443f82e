package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tockd/tock/schedule"
)

// apiClient talks to tock's public REST API over keep-alive connections, at most concurrency
// requests at a time per base URL.
type apiClient struct {
	bases       []string // http://host:port, no trailing slash
	hc          *http.Client
	concurrency int
}

func newAPIClient(bases []string, concurrency int) *apiClient {
	tr := &http.Transport{
		Proxy:               nil, // loopback and cluster nodes: never through a proxy
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        concurrency * (len(bases) + 1),
		MaxIdleConnsPerHost: concurrency,
		MaxConnsPerHost:     concurrency,
		IdleConnTimeout:     90 * time.Second,
	}
	return &apiClient{bases: bases, hc: &http.Client{Transport: tr, Timeout: 30 * time.Second}, concurrency: concurrency}
}

func (c *apiClient) close() { c.hc.CloseIdleConnections() }

// apiError is a non-2xx answer.
type apiError struct {
	Method, URL string
	Status      int
	Body        string
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%s %s: %d %s", e.Method, e.URL, e.Status, strings.TrimSpace(e.Body))
}

// do sends one JSON request and decodes a 2xx answer into out.
func (c *apiClient) do(ctx context.Context, base, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("bench: encode %s %s: %w", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return fmt.Errorf("bench: %s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("bench: %s %s: %w", method, base+path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return fmt.Errorf("bench: read %s %s: %w", method, base+path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return &apiError{Method: method, URL: base + path, Status: resp.StatusCode, Body: string(raw)}
	}
	if out != nil && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			return fmt.Errorf("bench: decode %s %s: %w", method, base+path, err)
		}
	}
	return nil
}

// retryable: the request may be sent again (creation carries a request_id, so a repeat is
// answered with the original timer).
func retryable(err error) bool {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.Status == http.StatusTooManyRequests || ae.Status >= 500
	}
	return !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// doRetry is do with up to 5 attempts on transient errors.
func (c *apiClient) doRetry(ctx context.Context, base, method, path string, body, out any) error {
	var err error
	for attempt := 1; attempt <= 5; attempt++ {
		if err = c.do(ctx, base, method, path, body, out); err == nil || !retryable(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
		}
	}
	return err
}

// timerRequest is the create body of POST /api/v1/timers.
type timerRequest struct {
	kind      string          // the bench's label, not sent
	App       string          `json:"app"`
	Name      string          `json:"name"`
	Schedule  schedule.Spec   `json:"schedule"`
	Callback  callbackRequest `json:"callback"`
	Retry     *retryRequest   `json:"retry,omitempty"`
	Enabled   *bool           `json:"enabled,omitempty"`
	RequestID string          `json:"request_id,omitempty"`
}

type callbackRequest struct {
	URL     string `json:"url"`
	Method  string `json:"method,omitempty"`
	Timeout string `json:"timeout,omitempty"`
}

type retryRequest struct {
	MaxAttempts int    `json:"max_attempts"`
	Backoff     string `json:"backoff"`
	MaxBackoff  string `json:"max_backoff"`
}

// timerResponse is the part of a timer the bench reads.
type timerResponse struct {
	ID         int64         `json:"id"`
	Status     string        `json:"status"`
	Schedule   schedule.Spec `json:"schedule"`
	CreatedAt  string        `json:"created_at"`
	NextFireAt *string       `json:"next_fire_at"`
}

// createAll creates the timers through the API, reqs[i] on bases[i % len(bases)], with
// c.concurrency workers per base. It stops at the first error; out holds every timer
// created so far (zero ID where none was), so the caller can clean up.
func (c *apiClient) createAll(ctx context.Context, reqs []timerRequest) ([]timerResponse, error) {
	out := make([]timerResponse, len(reqs))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next     atomic.Int64
		firstErr error
		errOnce  sync.Once
		wg       sync.WaitGroup
	)
	workers := c.concurrency * len(c.bases)
	if workers > len(reqs) {
		workers = len(reqs)
	}
	for w := 0; w < workers; w++ {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(reqs) || ctx.Err() != nil {
					return
				}
				base := c.bases[i%len(c.bases)]
				var tr timerResponse
				if err := c.doRetry(ctx, base, http.MethodPost, "/api/v1/timers", reqs[i], &tr); err != nil {
					errOnce.Do(func() {
						firstErr = fmt.Errorf("bench: create timer %s: %w", reqs[i].Name, err)
						cancel()
					})
					return
				}
				out[i] = tr
			}
		})
	}
	wg.Wait()
	return out, firstErr
}

// batchResponse is the part of a batch the bench reads.
type batchResponse struct {
	ID     int64          `json:"id"`
	Status string         `json:"status"`
	Total  int            `json:"total"`
	Counts map[string]int `json:"counts"`
}

// deleteApp soft-deletes every timer of app: one batch delete (selector on the app, which
// is unique to the run) and, if batches are unavailable or some task failed, a DELETE per
// id with the client's concurrency. It returns the method used.
func (c *apiClient) deleteApp(ctx context.Context, app string, ids []int64) (string, error) {
	body := map[string]any{
		"operation":  "delete",
		"target":     map[string]any{"app": app},
		"request_id": app + "-cleanup",
	}
	var b batchResponse
	err := c.doRetry(ctx, c.bases[0], http.MethodPost, "/api/v1/batches", body, &b)
	var ae *apiError
	if errors.As(err, &ae) && ae.Status == http.StatusUnprocessableEntity && strings.Contains(ae.Body, "no_match") {
		return "batch (nothing left)", nil
	}
	if err == nil {
		final, werr := c.waitBatch(ctx, b.ID)
		if werr == nil && final.Status == "success" {
			return fmt.Sprintf("batch delete %d", b.ID), nil
		}
		// Fall through: whatever the batch did not delete is deleted one by one (404 = done).
	}
	return "per-timer DELETE", c.deleteEach(ctx, ids)
}

func (c *apiClient) waitBatch(ctx context.Context, id int64) (batchResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	for {
		var b batchResponse
		if err := c.doRetry(ctx, c.bases[0], http.MethodGet, fmt.Sprintf("/api/v1/batches/%d", id), nil, &b); err != nil {
			return b, err
		}
		switch b.Status {
		case "success", "fail", "partial_fail", "cancel":
			return b, nil
		}
		select {
		case <-ctx.Done():
			return b, fmt.Errorf("bench: batch %d still %s: %w", id, b.Status, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (c *apiClient) deleteEach(ctx context.Context, ids []int64) error {
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	workers := min(c.concurrency*len(c.bases), len(ids))
	for w := 0; w < workers; w++ {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(ids) || ctx.Err() != nil {
					return
				}
				err := c.doRetry(ctx, c.bases[i%len(c.bases)], http.MethodDelete, fmt.Sprintf("/api/v1/timers/%d", ids[i]), nil, nil)
				var ae *apiError
				if err != nil && !(errors.As(err, &ae) && ae.Status == http.StatusNotFound) {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return firstErr
}

// readyz waits until base answers /readyz with 200 and returns its checks (store and
// Redis names).
func (c *apiClient) readyz(ctx context.Context, base string, wait time.Duration) (map[string]string, error) {
	deadline := time.Now().Add(wait)
	for {
		var body struct {
			Checks map[string]string `json:"checks"`
		}
		err := c.do(ctx, base, http.MethodGet, "/readyz", nil, &body)
		if err == nil {
			return body.Checks, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("bench: %s not ready: %w", base, err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (c *apiClient) version(ctx context.Context, base string) string {
	var body struct {
		Version string `json:"version"`
	}
	if err := c.do(ctx, base, http.MethodGet, "/healthz", nil, &body); err != nil {
		return ""
	}
	return body.Version
}

// processMetrics is what the bench reads from a target's /metrics.
type processMetrics struct {
	CPUSeconds float64
	RSSBytes   float64
	OK         bool
}

// scrapeProcess reads process_cpu_seconds_total and process_resident_memory_bytes from
// base/metrics (Prometheus text format).
func (c *apiClient) scrapeProcess(ctx context.Context, base string) (processMetrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return processMetrics{}, fmt.Errorf("bench: metrics request: %w", err)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return processMetrics{}, fmt.Errorf("bench: scrape %s/metrics: %w", base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return processMetrics{}, fmt.Errorf("bench: scrape %s/metrics: status %d", base, resp.StatusCode)
	}
	return parseProcessMetrics(resp.Body)
}

func parseProcessMetrics(r io.Reader) (processMetrics, error) {
	var m processMetrics
	found := 0
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, val, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		var dst *float64
		switch name {
		case "process_cpu_seconds_total":
			dst = &m.CPUSeconds
		case "process_resident_memory_bytes":
			dst = &m.RSSBytes
		default:
			continue
		}
		fields := strings.Fields(val)
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return m, fmt.Errorf("bench: metric %s: %w", name, err)
		}
		*dst = v
		found++
	}
	if err := sc.Err(); err != nil {
		return m, fmt.Errorf("bench: read metrics: %w", err)
	}
	if found < 2 {
		return m, errors.New("bench: /metrics has no process_cpu_seconds_total / process_resident_memory_bytes")
	}
	m.OK = true
	return m, nil
}
