package api

import (
	"net/http"
	"strings"
	"testing"

	"github.com/tockd/tock/dao"
)

// TestCreateTimerBadInput sends, for every field, values that must be refused, and checks the
// exact status, code and field of each answer (and, through do, that none is a 5xx).
func TestCreateTimerBadInput(t *testing.T) {
	t.Parallel()
	type mod func(m map[string]any)
	set := func(key string, v any) mod { return func(m map[string]any) { m[key] = v } }
	del := func(key string) mod { return func(m map[string]any) { delete(m, key) } }
	sub := func(obj, key string, v any) mod {
		return func(m map[string]any) {
			o, ok := m[obj].(map[string]any)
			if !ok {
				o = map[string]any{}
				m[obj] = o
			}
			o[key] = v
		}
	}
	sched := func(spec map[string]any) mod { return set("schedule", spec) }
	header := func(name, value string) mod { return sub("callback", "headers", map[string]any{name: value}) }
	const (
		s400 = http.StatusBadRequest
		s422 = http.StatusUnprocessableEntity
	)
	cases := []struct {
		name   string
		mod    mod
		status int
		code   string
		field  string
	}{
		// Top level.
		{"UnknownField", set("colour", "red"), s400, "unknown_field", "colour"},
		{"FieldCaseMatters", set("App", "x"), s400, "unknown_field", "App"},
		{"Status", set("status", "enabled"), s400, "unknown_field", "status"},

		{"AppMissing", del("app"), s422, "missing_field", "app"},
		{"AppNull", set("app", nil), s422, "missing_field", "app"},
		{"AppNumber", set("app", 5), s400, "invalid_field", "app"},
		{"AppEmpty", set("app", ""), s422, "invalid_value", "app"},
		{"AppUpper", set("app", "Billing"), s422, "invalid_value", "app"},
		{"AppSpace", set("app", "a b"), s422, "invalid_value", "app"},
		{"AppDot", set("app", "a.b"), s422, "invalid_value", "app"},
		{"AppTooLong", set("app", strings.Repeat("a", 65)), s422, "invalid_value", "app"},
		{"AppUnicode", set("app", "café"), s422, "invalid_value", "app"},
		{"AppNewline", set("app", "a\n"), s422, "invalid_value", "app"},

		{"NameMissing", del("name"), s422, "missing_field", "name"},
		{"NameArray", set("name", []any{"a"}), s400, "invalid_field", "name"},
		{"NameEmpty", set("name", ""), s422, "invalid_value", "name"},
		{"NameBlank", set("name", "   "), s422, "invalid_value", "name"},
		{"NameTooLong", set("name", strings.Repeat("é", 129)), s422, "invalid_value", "name"},
		{"NameControl", set("name", "a\x00b"), s422, "invalid_value", "name"},
		{"NameNewline", set("name", "a\nb"), s422, "invalid_value", "name"},
		{"NameTrailingSpace", set("name", "a "), s422, "invalid_value", "name"},
		{"NameLeadingSpace", set("name", "\u00a0a"), s422, "invalid_value", "name"},

		{"ScheduleMissing", del("schedule"), s422, "missing_field", "schedule"},
		{"ScheduleString", set("schedule", "* * * * *"), s400, "invalid_field", "schedule"},
		{"ScheduleEmpty", sched(map[string]any{}), s422, "invalid_schedule", "schedule"},
		{"ScheduleTwoKinds", sched(map[string]any{"every": "1m", "in": "1m"}), s422, "invalid_schedule", "schedule"},
		{"ScheduleUnknown", sched(map[string]any{"every": "1m", "jitter": "1s"}), s400, "unknown_field", "schedule.jitter"},
		{"ScheduleNumber", sched(map[string]any{"every": 30}), s400, "invalid_field", "schedule.every"},
		{"CronBad", sched(map[string]any{"cron": "not a cron"}), s422, "invalid_schedule", "schedule.cron"},
		{"CronRange", sched(map[string]any{"cron": "61 * * * *"}), s422, "invalid_schedule", "schedule.cron"},
		{"CronFields", sched(map[string]any{"cron": "* * *"}), s422, "invalid_schedule", "schedule.cron"},
		{"CronSevenFields", sched(map[string]any{"cron": "* * * * * * *"}), s422, "invalid_schedule", "schedule.cron"},
		{"CronEvery", sched(map[string]any{"cron": "@every 5s"}), s422, "invalid_schedule", "schedule.cron"},
		{"CronTZPrefix", sched(map[string]any{"cron": "TZ=UTC * * * * *"}), s422, "invalid_schedule", "schedule.cron"},
		{"CronDescriptorUnknown", sched(map[string]any{"cron": "@fortnightly"}), s422, "invalid_schedule", "schedule.cron"},
		{"CronTooLong", sched(map[string]any{"cron": strings.Repeat("1,", 200) + "1 * * * *"}), s422, "invalid_schedule", "schedule.cron"},
		{"CronNeverFires", sched(map[string]any{"cron": "0 0 30 2 *"}), s422, "schedule_never_fires", "schedule.cron"},
		{"CronUnknownZone", sched(map[string]any{"cron": "* * * * *", "timezone": "Mars/Olympus"}), s422, "unknown_timezone", "schedule.timezone"},
		{"CronLocalZone", sched(map[string]any{"cron": "* * * * *", "timezone": "Local"}), s422, "unknown_timezone", "schedule.timezone"},
		{"CronZonePath", sched(map[string]any{"cron": "* * * * *", "timezone": "../../etc/passwd"}), s422, "unknown_timezone", "schedule.timezone"},
		{"ZoneWithoutCron", sched(map[string]any{"every": "1m", "timezone": "UTC"}), s422, "invalid_schedule", "schedule.timezone"},
		{"EveryBad", sched(map[string]any{"every": "often"}), s422, "invalid_schedule", "schedule.every"},
		{"EveryTooShort", sched(map[string]any{"every": "500ms"}), s422, "invalid_schedule", "schedule.every"},
		{"EveryNegative", sched(map[string]any{"every": "-1m"}), s422, "invalid_schedule", "schedule.every"},
		{"EveryFraction", sched(map[string]any{"every": "1.0000001s"}), s422, "invalid_schedule", "schedule.every"},
		{"EveryHuge", sched(map[string]any{"every": "999999999h"}), s422, "invalid_schedule", "schedule.every"},
		{"AtBad", sched(map[string]any{"at": "tomorrow"}), s422, "invalid_schedule", "schedule.at"},
		{"AtNoZone", sched(map[string]any{"at": "2026-12-01T00:00:00"}), s422, "invalid_schedule", "schedule.at"},
		{"AtBefore1970", sched(map[string]any{"at": "1969-12-31T23:59:59Z"}), s422, "invalid_schedule", "schedule.at"},
		{"InBad", sched(map[string]any{"in": "soon"}), s422, "invalid_schedule", "schedule.in"},
		{"InNegative", sched(map[string]any{"in": "-5m"}), s422, "invalid_schedule", "schedule.in"},
		{"InTooFar", sched(map[string]any{"in": "1000000h"}), s422, "invalid_schedule", "schedule.in"},

		{"CallbackMissing", del("callback"), s422, "missing_field", "callback"},
		{"CallbackString", set("callback", "http://h/"), s400, "invalid_field", "callback"},
		{"CallbackUnknown", sub("callback", "retries", 3), s400, "unknown_field", "callback.retries"},
		{"URLMissing", set("callback", map[string]any{"method": "POST"}), s422, "missing_field", "callback.url"},
		{"URLNumber", sub("callback", "url", 1), s400, "invalid_field", "callback.url"},
		{"URLEmpty", sub("callback", "url", ""), s422, "invalid_url", "callback.url"},
		{"URLNoScheme", sub("callback", "url", "example.com/hook"), s422, "invalid_url", "callback.url"},
		{"URLFTP", sub("callback", "url", "ftp://example.com/"), s422, "invalid_url", "callback.url"},
		{"URLFile", sub("callback", "url", "file:///etc/passwd"), s422, "invalid_url", "callback.url"},
		{"URLJavascript", sub("callback", "url", "javascript:alert(1)"), s422, "invalid_url", "callback.url"},
		{"URLNoHost", sub("callback", "url", "http:///path"), s422, "invalid_url", "callback.url"},
		{"URLOnlyPort", sub("callback", "url", "http://:80/"), s422, "invalid_url", "callback.url"},
		{"URLOpaque", sub("callback", "url", "http:example.com"), s422, "invalid_url", "callback.url"},
		{"URLBadPort", sub("callback", "url", "http://h:99999/"), s422, "invalid_url", "callback.url"},
		{"URLPortZero", sub("callback", "url", "http://h:0/"), s422, "invalid_url", "callback.url"},
		{"URLSpaceInHost", sub("callback", "url", "http://a b/"), s422, "invalid_url", "callback.url"},
		{"URLControl", sub("callback", "url", "http://h/\x7f"), s422, "invalid_url", "callback.url"},
		{"URLNewline", sub("callback", "url", "http://h/a\nb"), s422, "invalid_url", "callback.url"},
		{"URLLeadingSpace", sub("callback", "url", " http://h/"), s422, "invalid_url", "callback.url"},
		{"URLBadEscape", sub("callback", "url", "http://h/%zz"), s422, "invalid_url", "callback.url"},
		{"URLTooLong", sub("callback", "url", "http://h/"+strings.Repeat("a", MaxURLLen)), s422, "invalid_url", "callback.url"},
		{"MethodNumber", sub("callback", "method", 1), s400, "invalid_field", "callback.method"},
		{"MethodUnknown", sub("callback", "method", "FETCH"), s422, "invalid_value", "callback.method"},
		{"MethodHead", sub("callback", "method", "HEAD"), s422, "invalid_value", "callback.method"},
		{"MethodEmpty", sub("callback", "method", ""), s422, "invalid_value", "callback.method"},
		{"HeadersArray", sub("callback", "headers", []any{"a"}), s400, "invalid_field", "callback.headers"},
		{"HeaderValueNumber", sub("callback", "headers", map[string]any{"X-A": 1}), s400, "invalid_field", "callback.headers.X-A"},
		{"HeaderNameEmpty", header("", "v"), s422, "invalid_header", "callback.headers."},
		{"HeaderNameSpace", header("X A", "v"), s422, "invalid_header", "callback.headers.X A"},
		{"HeaderNameColon", header("X:A", "v"), s422, "invalid_header", "callback.headers.X:A"},
		{"HeaderNameUnicode", header("X-é", "v"), s422, "invalid_header", "callback.headers.X-é"},
		{"HeaderNameTooLong", header(strings.Repeat("x", MaxHeaderName+1), "v"), s422, "invalid_header", "callback.headers." + strings.Repeat("x", MaxHeaderName+1)},
		{"HeaderValueNewline", header("X-A", "a\r\nInjected: 1"), s422, "invalid_header", "callback.headers.X-A"},
		{"HeaderValueNUL", header("X-A", "a\x00"), s422, "invalid_header", "callback.headers.X-A"},
		{"HeaderValueTooLong", header("X-A", strings.Repeat("v", MaxHeaderValue+1)), s422, "invalid_header", "callback.headers.X-A"},
		{"HeaderTock", header("Tock-Timer-Id", "1"), s422, "invalid_header", "callback.headers.Tock-Timer-Id"},
		{"HeaderTockLower", header("tock-scheduled-at", "1"), s422, "invalid_header", "callback.headers.tock-scheduled-at"},
		{"HeaderIdempotencyKey", header("idempotency-key", "1"), s422, "invalid_header", "callback.headers.idempotency-key"},
		{"HeaderHost", header("Host", "evil"), s422, "invalid_header", "callback.headers.Host"},
		{"HeaderContentLength", header("Content-Length", "5"), s422, "invalid_header", "callback.headers.Content-Length"},
		{"HeaderTransferEncoding", header("Transfer-Encoding", "chunked"), s422, "invalid_header", "callback.headers.Transfer-Encoding"},
		{"HeaderDuplicate", sub("callback", "headers", map[string]any{"X-A": "1", "x-a": "2"}), s422, "invalid_header", "callback.headers.x-a"},
		{"HeadersTooMany", sub("callback", "headers", manyHeaders(MaxHeaders+1)), s422, "invalid_header", "callback.headers"},
		{"BodyObject", sub("callback", "body", map[string]any{"a": 1}), s400, "invalid_field", "callback.body"},
		{"BodyTooLong", sub("callback", "body", strings.Repeat("b", MaxCallbackBody+1)), s422, "invalid_value", "callback.body"},
		{"TimeoutNumber", sub("callback", "timeout", 5), s400, "invalid_field", "callback.timeout"},
		{"TimeoutBad", sub("callback", "timeout", "5"), s422, "invalid_value", "callback.timeout"},
		{"TimeoutZero", sub("callback", "timeout", "0s"), s422, "invalid_value", "callback.timeout"},
		{"TimeoutTooShort", sub("callback", "timeout", "999us"), s422, "invalid_value", "callback.timeout"},
		{"TimeoutTooLong", sub("callback", "timeout", "5m1s"), s422, "invalid_value", "callback.timeout"},
		{"TimeoutFraction", sub("callback", "timeout", "1.5ms"), s422, "invalid_value", "callback.timeout"},
		{"TimeoutNegative", sub("callback", "timeout", "-1s"), s422, "invalid_value", "callback.timeout"},

		{"RetryString", set("retry", "3"), s400, "invalid_field", "retry"},
		{"RetryUnknown", sub("retry", "jitter", true), s400, "unknown_field", "retry.jitter"},
		{"AttemptsString", sub("retry", "max_attempts", "3"), s400, "invalid_field", "retry.max_attempts"},
		{"AttemptsFraction", sub("retry", "max_attempts", 2.5), s400, "invalid_field", "retry.max_attempts"},
		{"AttemptsHuge", sub("retry", "max_attempts", 1e20), s400, "invalid_field", "retry.max_attempts"},
		{"AttemptsZero", sub("retry", "max_attempts", 0), s422, "invalid_value", "retry.max_attempts"},
		{"AttemptsNegative", sub("retry", "max_attempts", -1), s422, "invalid_value", "retry.max_attempts"},
		{"AttemptsTooMany", sub("retry", "max_attempts", 101), s422, "invalid_value", "retry.max_attempts"},
		{"BackoffBad", sub("retry", "backoff", "1 second"), s422, "invalid_value", "retry.backoff"},
		{"BackoffZero", sub("retry", "backoff", "0s"), s422, "invalid_value", "retry.backoff"},
		{"BackoffTooLong", sub("retry", "backoff", "2h"), s422, "invalid_value", "retry.backoff"},
		{"MaxBackoffBad", sub("retry", "max_backoff", "x"), s422, "invalid_value", "retry.max_backoff"},
		{"MaxBackoffTooLong", sub("retry", "max_backoff", "25h"), s422, "invalid_value", "retry.max_backoff"},
		{"MaxBackoffBelowBackoff", set("retry", map[string]any{"backoff": "10s", "max_backoff": "5s"}), s422, "invalid_value", "retry.max_backoff"},
		{"MaxBackoffBelowDefaultBackoff", set("retry", map[string]any{"max_backoff": "500ms"}), s422, "invalid_value", "retry.max_backoff"},

		{"EnabledString", set("enabled", "true"), s400, "invalid_field", "enabled"},
		{"EnabledNumber", set("enabled", 1), s400, "invalid_field", "enabled"},

		{"RequestIDNumber", set("request_id", 7), s400, "invalid_field", "request_id"},
		{"RequestIDBlank", set("request_id", " "), s422, "invalid_value", "request_id"},
		{"RequestIDTooLong", set("request_id", strings.Repeat("r", MaxRequestIDLen+1)), s422, "invalid_value", "request_id"},
		{"RequestIDTrailingSpace", set("request_id", "k "), s422, "invalid_value", "request_id"},
		{"RequestIDControl", set("request_id", "a\tb"), s422, "invalid_value", "request_id"},
	}
	rawCases := []struct {
		name   string
		body   string
		status int
		code   string
	}{
		{"Empty", "", s400, "invalid_json"},
		{"Whitespace", " \n\t", s400, "invalid_json"},
		{"Null", "null", s400, "invalid_json"},
		{"Array", `[{"app":"a"}]`, s400, "invalid_json"},
		{"String", `"timer"`, s400, "invalid_json"},
		{"Number", `42`, s400, "invalid_json"},
		{"Truncated", `{"app":"a","name":`, s400, "invalid_json"},
		{"TrailingComma", `{"app":"a",}`, s400, "invalid_json"},
		{"SingleQuotes", `{'app':'a'}`, s400, "invalid_json"},
		{"TwoObjects", `{} {}`, s400, "invalid_json"},
		{"TrailingGarbage", `{}x`, s400, "invalid_json"},
		{"Comment", `{/* hi */}`, s400, "invalid_json"},
		{"BadEscape", `{"app":"\q"}`, s400, "invalid_json"},
		{"NaN", `{"enabled":NaN}`, s400, "invalid_json"},
		{"NotUTF8Key", "{\"\xff\":1}", s400, "unknown_field"},
		{"FormEncoded", `app=a&name=b`, s400, "invalid_json"},
	}
	forEachStore(t, func(t *testing.T, s *dao.Store) {
		b := setup(t, s)
		app := uniqueApp("bad")
		for i, c := range cases {
			body := timerBody(app, "t"+itoa(int64(i)))
			c.mod(body)
			r := b.do(t, http.MethodPost, "/api/v1/timers", body)
			t.Run(c.name, func(t *testing.T) { r.wantError(t, c.status, c.code, c.field) })
		}
		for _, c := range rawCases {
			r := b.do(t, http.MethodPost, "/api/v1/timers", c.body)
			t.Run(c.name, func(t *testing.T) {
				if r.status != c.status || !strings.Contains(string(r.body), `"code":"`+c.code+`"`) {
					t.Fatalf("status %d body %s, want %d %s", r.status, r.body, c.status, c.code)
				}
			})
		}
		// Nothing was created.
		r := b.do(t, http.MethodGet, "/api/v1/timers?app="+app, nil)
		if string(r.body) != `{"items":[],"next_cursor":""}` {
			t.Fatalf("bad input created timers: %s", r.body)
		}
	})
}

func manyHeaders(n int) map[string]any {
	h := map[string]any{}
	for i := range n {
		h["X-H"+itoa(int64(i))] = "v"
	}
	return h
}

// TestValidEdgeInput: the limits themselves are accepted.
func TestCreateTimerEdgeInput(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s *dao.Store) {
		b := setup(t, s)
		app := uniqueApp("edge")
		for i, c := range []map[string]any{
			{"schedule": map[string]any{"every": "1s"}},
			{"schedule": map[string]any{"cron": "@hourly"}},
			{"schedule": map[string]any{"cron": "*/10 * * * * *"}},
			{"schedule": map[string]any{"cron": " 0 9 * * MON-FRI ", "timezone": "America/New_York"}},
			{"schedule": map[string]any{"in": "0s"}},
			{"schedule": map[string]any{"at": "9999-12-31T23:59:59.999Z"}},
			{"callback": map[string]any{"url": "HTTP://[::1]:65535/x?y#z", "method": "delete", "timeout": "5m"}},
			{"callback": map[string]any{"url": "https://user:pw@10.0.0.1/", "timeout": "1ms", "headers": manyHeaders(MaxHeaders)}},
			{"callback": map[string]any{"url": "http://localhost/", "body": strings.Repeat("b", MaxCallbackBody)}},
			{"retry": map[string]any{"max_attempts": 100, "backoff": "1ms", "max_backoff": "24h"}},
			{"retry": map[string]any{"max_attempts": 1, "backoff": "1h"}},
			{"request_id": ""},
			{"enabled": nil, "retry": nil, "request_id": nil},
		} {
			body := timerBody(app, "edge"+itoa(int64(i)))
			for k, v := range c {
				body[k] = v
			}
			b.create(t, body, http.StatusCreated)
		}
	})
}
