package api

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/tockd/tock/dao"
	"github.com/tockd/tock/schedule"
)

// Limits and defaults of a timer's fields. The lengths fit the columns of sql/ so that no
// accepted value can fail in the store.
const (
	MaxNameLen      = 128 // characters
	MaxRequestIDLen = 128 // characters
	MaxURLLen       = 2048
	MaxScheduleLen  = 256 // characters of each schedule field
	MaxHeaders      = 64
	MaxHeaderName   = 256      // bytes
	MaxHeaderValue  = 4096     // bytes
	MaxCallbackBody = 32 << 10 // bytes
	// MaxCallbackJSON caps the callback as stored (JSON in a TEXT column of 64 KiB); JSON
	// escaping can make it several times longer than its parts ("<" is stored as \u003c).
	MaxCallbackJSON = 60 << 10

	DefaultMethod      = http.MethodPost
	DefaultTimeout     = 5 * time.Second
	MinTimeout         = time.Millisecond
	MaxTimeout         = 5 * time.Minute
	DefaultMaxAttempts = 3
	MaxMaxAttempts     = 100
	DefaultBackoff     = time.Second
	DefaultMaxBackoff  = time.Minute
	MaxBackoff         = time.Hour
	MaxMaxBackoff      = 24 * time.Hour
)

var appPattern = regexp.MustCompile(`^[a-z0-9_-]{1,64}$`)

var methods = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// reservedHeaders are set by tock itself (Tock-* is a prefix) or by the HTTP client and
// cannot be chosen by a timer.
var reservedHeaders = []string{
	"Idempotency-Key", "Host", "Content-Length",
	"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

func validateApp(s string) error {
	if !appPattern.MatchString(s) {
		return newError(codeInvalidValue, "app", "must be 1 to 64 characters of a-z, 0-9, _ and -")
	}
	return nil
}

// validateText checks a free-text field: not blank, no control characters, at most max
// characters, no surrounding whitespace (MySQL's PAD SPACE collations would compare "a" and
// "a " equal in the unique keys while SQLite would not).
func validateText(field, s string, max int) error {
	switch {
	case strings.TrimSpace(s) == "":
		return newError(codeInvalidValue, field, "must not be empty")
	case strings.TrimSpace(s) != s:
		return newError(codeInvalidValue, field, "must not start or end with whitespace")
	case utf8.RuneCountInString(s) > max:
		return newError(codeInvalidValue, field, "must be at most %d characters", max)
	case strings.ContainsFunc(s, unicode.IsControl):
		return newError(codeInvalidValue, field, "must not contain control characters")
	}
	return nil
}

// normalizeSchedule validates a user's spec and returns the form to store.
func normalizeSchedule(s schedule.Spec, now time.Time) (schedule.Spec, error) {
	for _, f := range []struct{ name, v string }{
		{"cron", s.Cron}, {"timezone", s.Timezone}, {"every", s.Every}, {"at", s.At}, {"in", s.In},
	} {
		if utf8.RuneCountInString(f.v) > MaxScheduleLen {
			return schedule.Spec{}, newError(codeInvalidSchedule, "schedule."+f.name, "must be at most %d characters", MaxScheduleLen)
		}
	}
	return schedule.Normalize(s, now)
}

// canonicalSchedule is the spec as it counts for idempotency: the normalized spec, except
// that "in" stays relative (it resolves to a different "at" on every retry).
func canonicalSchedule(raw schedule.Spec, normalized schedule.Spec) schedule.Spec {
	if raw.In == "" {
		return normalized
	}
	d, _ := time.ParseDuration(raw.In) // valid: normalizeSchedule passed
	return schedule.Spec{In: d.String()}
}

func validateURL(s string) error {
	const field = "callback.url"
	if s == "" {
		return newError(codeInvalidURL, field, "must not be empty")
	}
	if len(s) > MaxURLLen {
		return newError(codeInvalidURL, field, "must be at most %d bytes", MaxURLLen)
	}
	u, err := url.Parse(s)
	if err != nil {
		return newError(codeInvalidURL, field, "%q is not a URL", s)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return newError(codeInvalidURL, field, "the scheme must be http or https")
	}
	if u.Hostname() == "" {
		return newError(codeInvalidURL, field, "the URL needs a host")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return newError(codeInvalidURL, field, "the port must be 1 to 65535")
		}
	}
	// The executor builds its request the same way; refuse what it could not send.
	if _, err := http.NewRequest(http.MethodPost, s, nil); err != nil {
		return newError(codeInvalidURL, field, "%q cannot be requested: %v", s, err)
	}
	return nil
}

func validateHeaders(h map[string]string) error {
	if len(h) > MaxHeaders {
		return newError(codeInvalidHeader, "callback.headers", "at most %d headers", MaxHeaders)
	}
	seen := make(map[string]string, len(h))
	for _, name := range slices.Sorted(maps.Keys(h)) {
		field := "callback.headers." + name
		if name == "" || len(name) > MaxHeaderName || !validHeaderName(name) {
			return newError(codeInvalidHeader, field, "%q is not a valid header name", name)
		}
		canon := http.CanonicalHeaderKey(name)
		if strings.HasPrefix(canon, "Tock-") || slices.Contains(reservedHeaders, canon) {
			return newError(codeInvalidHeader, field, "%s is set by tock and cannot be chosen", canon)
		}
		if prev, ok := seen[canon]; ok {
			return newError(codeInvalidHeader, field, "%q and %q name the same header", prev, name)
		}
		seen[canon] = name
		v := h[name]
		if len(v) > MaxHeaderValue {
			return newError(codeInvalidHeader, field, "the value must be at most %d bytes", MaxHeaderValue)
		}
		if !validHeaderValue(v) {
			return newError(codeInvalidHeader, field, "the value must not contain control characters")
		}
	}
	return nil
}

// validHeaderName: an RFC 9110 token.
func validHeaderName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// validHeaderValue: visible characters, spaces and tabs, and non-ASCII bytes.
func validHeaderValue(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// duration parses a Go duration within [min, max] that is a whole number of milliseconds
// (storage keeps milliseconds).
func duration(field, s string, min, max time.Duration) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		return 0, newError(codeInvalidValue, field, "%q is not a duration like 5s", s)
	case d < min || d > max:
		return 0, newError(codeInvalidValue, field, "must be between %s and %s", min, max)
	case d%time.Millisecond != 0:
		return 0, newError(codeInvalidValue, field, "must be a whole number of milliseconds")
	}
	return d, nil
}

// resolveCallback merges in over base (defaults for a new timer, the stored callback for a
// PATCH) and validates the result.
func resolveCallback(in callbackInput, base dao.Callback) (dao.Callback, error) {
	out := base
	if in.URL != nil {
		out.URL = *in.URL
	}
	if err := validateURL(out.URL); err != nil {
		return out, err
	}
	if in.Method != nil {
		m := strings.ToUpper(*in.Method)
		if !slices.Contains(methods, m) {
			return out, newError(codeInvalidValue, "callback.method", "must be one of %s", strings.Join(methods, ", "))
		}
		out.Method = m
	}
	if in.HeadersGiven {
		if err := validateHeaders(in.Headers); err != nil {
			return out, err
		}
		out.Headers = in.Headers
		if len(out.Headers) == 0 {
			out.Headers = nil
		}
	}
	if in.Body != nil {
		if len(*in.Body) > MaxCallbackBody {
			return out, newError(codeInvalidValue, "callback.body", "must be at most %d bytes", MaxCallbackBody)
		}
		out.Body = *in.Body
	}
	if in.Timeout != nil {
		d, err := duration("callback.timeout", *in.Timeout, MinTimeout, MaxTimeout)
		if err != nil {
			return out, err
		}
		out.TimeoutMS = d.Milliseconds()
	}
	if b, _ := json.Marshal(out); len(b) > MaxCallbackJSON {
		return out, newError(codeInvalidValue, "callback", "the callback takes %d bytes stored, more than %d; shorten its body or headers", len(b), MaxCallbackJSON)
	}
	return out, nil
}

// resolveRetry merges in over base and validates the result. For a new timer an omitted
// max_backoff grows to the backoff when that is longer than the default.
func resolveRetry(in retryInput, base dao.RetryPolicy, create bool) (dao.RetryPolicy, error) {
	out := base
	if in.MaxAttempts != nil {
		if *in.MaxAttempts < 1 || *in.MaxAttempts > MaxMaxAttempts {
			return out, newError(codeInvalidValue, "retry.max_attempts", "must be between 1 and %d", MaxMaxAttempts)
		}
		out.MaxAttempts = *in.MaxAttempts
	}
	if in.Backoff != nil {
		d, err := duration("retry.backoff", *in.Backoff, time.Millisecond, MaxBackoff)
		if err != nil {
			return out, err
		}
		out.BackoffMS = d.Milliseconds()
		if create && in.MaxBackoff == nil && out.BackoffMS > out.MaxBackoffMS {
			out.MaxBackoffMS = out.BackoffMS
		}
	}
	if in.MaxBackoff != nil {
		d, err := duration("retry.max_backoff", *in.MaxBackoff, time.Millisecond, MaxMaxBackoff)
		if err != nil {
			return out, err
		}
		out.MaxBackoffMS = d.Milliseconds()
	}
	if out.MaxBackoffMS < out.BackoffMS {
		return out, newError(codeInvalidValue, "retry.max_backoff", "must not be shorter than retry.backoff (%s)", msDuration(out.BackoffMS))
	}
	return out, nil
}

func defaultCallback() dao.Callback {
	return dao.Callback{Method: DefaultMethod, TimeoutMS: DefaultTimeout.Milliseconds()}
}

func defaultRetry() dao.RetryPolicy {
	return dao.RetryPolicy{
		MaxAttempts:  DefaultMaxAttempts,
		BackoffMS:    DefaultBackoff.Milliseconds(),
		MaxBackoffMS: DefaultMaxBackoff.Milliseconds(),
	}
}

// newTimer validates a create request at now and returns the timer to insert.
func newTimer(r createRequest, now time.Time) (dao.Timer, error) {
	var t dao.Timer
	switch {
	case r.App == nil:
		return t, newError(codeMissingField, "app", "app is required")
	case r.Name == nil:
		return t, newError(codeMissingField, "name", "name is required")
	case r.Schedule == nil:
		return t, newError(codeMissingField, "schedule", "schedule is required")
	case r.Callback == nil:
		return t, newError(codeMissingField, "callback", "callback is required")
	case r.Callback.URL == nil:
		return t, newError(codeMissingField, "callback.url", "callback.url is required")
	}
	if err := validateApp(*r.App); err != nil {
		return t, err
	}
	if err := validateText("name", *r.Name, MaxNameLen); err != nil {
		return t, err
	}
	spec, err := normalizeSchedule(*r.Schedule, now)
	if err != nil {
		return t, err
	}
	cb, err := resolveCallback(*r.Callback, defaultCallback())
	if err != nil {
		return t, err
	}
	retry := defaultRetry()
	if r.Retry != nil {
		if retry, err = resolveRetry(*r.Retry, retry, true); err != nil {
			return t, err
		}
	}
	misfire := dao.MisfireFireAll
	if r.Misfire != nil {
		if misfire, err = validateMisfire(*r.Misfire); err != nil {
			return t, err
		}
	}
	var reqID string
	if r.RequestID != nil && *r.RequestID != "" {
		reqID = *r.RequestID
		if err := validateText("request_id", reqID, MaxRequestIDLen); err != nil {
			return t, err
		}
	}
	enabled := r.Enabled == nil || *r.Enabled
	t = dao.Timer{
		App:       *r.App,
		Name:      *r.Name,
		Status:    dao.StatusDisabled,
		Schedule:  dao.JSONSpec(spec),
		AnchorMS:  now.UnixMilli(),
		Callback:  cb,
		Retry:     retry,
		Misfire:   misfire,
		RequestID: reqID,
	}
	if enabled {
		t.Status = dao.StatusEnabled
	}
	if reqID != "" {
		t.RequestHash = requestHash(t, canonicalSchedule(*r.Schedule, spec))
	}
	return t, nil
}

// requestHash fingerprints a create request for idempotency: the resolved values (defaults
// filled in, durations in milliseconds) re-marshaled, so whitespace, key order and spelling
// ("5s" or "5000ms") do not matter.
func requestHash(t dao.Timer, spec schedule.Spec) string {
	canon := struct {
		App       string          `json:"app"`
		Name      string          `json:"name"`
		Schedule  schedule.Spec   `json:"schedule"`
		Callback  dao.Callback    `json:"callback"`
		Retry     dao.RetryPolicy `json:"retry"`
		Status    string          `json:"status"`
		RequestID string          `json:"request_id"`
		// Omitted when default, so keys sent before the field existed still match.
		Misfire string `json:"misfire,omitempty"`
	}{t.App, t.Name, spec, t.Callback, t.Retry, t.Status, t.RequestID, ""}
	if t.Misfire != dao.MisfireFireAll {
		canon.Misfire = t.Misfire
	}
	b, _ := json.Marshal(canon) // plain strings, ints and maps: cannot fail
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// applyPatch validates a PATCH against the stored timer at now and returns the timer to
// write. A new schedule resets the anchor and brings a completed one-shot back to enabled.
func applyPatch(cur dao.Timer, p patchRequest, now time.Time) (dao.Timer, error) {
	t := cur
	if p.Name != nil {
		if err := validateText("name", *p.Name, MaxNameLen); err != nil {
			return t, err
		}
		t.Name = *p.Name
	}
	if p.Schedule != nil {
		spec, err := normalizeSchedule(*p.Schedule, now)
		if err != nil {
			return t, err
		}
		t.Schedule = dao.JSONSpec(spec)
		t.AnchorMS = now.UnixMilli()
		if t.Status == dao.StatusCompleted {
			t.Status = dao.StatusEnabled
		}
	}
	if p.Callback != nil {
		cb, err := resolveCallback(*p.Callback, cur.Callback)
		if err != nil {
			return t, err
		}
		t.Callback = cb
	}
	if p.Retry != nil {
		r, err := resolveRetry(*p.Retry, cur.Retry, false)
		if err != nil {
			return t, err
		}
		t.Retry = r
	}
	if p.Misfire != nil {
		m, err := validateMisfire(*p.Misfire)
		if err != nil {
			return t, err
		}
		t.Misfire = m
	}
	return t, nil
}

// validateMisfire accepts the misfire policies of dao (fire_all, fire_once, skip).
func validateMisfire(m string) (string, error) {
	if !dao.ValidMisfire(m) {
		return "", newError(codeInvalidValue, "misfire", "must be fire_all, fire_once or skip, not %q", m)
	}
	return m, nil
}

func msDuration(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }
