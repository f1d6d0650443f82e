package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tockd/tock/dao/daotest"
)

var fuzzSeeds = []string{
	`{"app":"a","name":"n","schedule":{"every":"30s"},"callback":{"url":"http://127.0.0.1:9/"}}`,
	`{"app":"a","name":"c","schedule":{"cron":"0 9 * * MON-FRI","timezone":"Europe/Berlin"},"callback":{"url":"https://h/x","method":"put","headers":{"X-A":"1"},"body":"{}","timeout":"2s"},"retry":{"max_attempts":5,"backoff":"2s","max_backoff":"1m"},"enabled":false,"request_id":"r1"}`,
	`{"app":"a","name":"o","schedule":{"at":"2026-01-01T00:00:00Z"},"callback":{"url":"http://h/"}}`,
	`{"app":"a","name":"i","schedule":{"in":"5m"},"callback":{"url":"http://h/"},"request_id":"r2"}`,
	`{"app":"a","name":"d","schedule":{"cron":"@daily"},"callback":{"url":"http://h/"}}`,
	`{"app":"a","name":"s","schedule":{"cron":"*/5 * * * * *"},"callback":{"url":"http://[::1]:8080/"}}`,
	`{"app":"a","name":"never","schedule":{"cron":"0 0 30 2 *"},"callback":{"url":"http://h/"}}`,
	`{"app":"a","name":"z","schedule":{"cron":"* * * * *","timezone":"Nowhere/City"},"callback":{"url":"http://h/"}}`,
	`{"app":"a","name":"u","schedule":{"every":"1m"},"callback":{"url":"ftp://h/"}}`,
	`{"app":"a","name":"h","schedule":{"every":"1m"},"callback":{"url":"http://h/","headers":{"Tock-X":"1","bad name":"v"}}}`,
	`{"app":"a","name":"r","schedule":{"every":"1m"},"callback":{"url":"http://h/"},"retry":{"max_attempts":1e9,"backoff":"-1s"}}`,
	`{"app":"A","name":"","schedule":{},"callback":{}}`,
	`{"app":1,"name":[],"schedule":"x","callback":null,"enabled":"yes","request_id":{}}`,
	`{"unknown":true}`,
	`{"app":"a","name":"n","schedule":{"every":"30s","at":"x"},"callback":{"url":"http://h/"}}`,
	`{"app":"a","name":"n","schedule":{"cron":"0 0 0 ? * L"},"callback":{"url":"http://h/"}}`,
	`{"app":"a","name":"n","schedule":{"cron":"0-59/0 * * * *"},"callback":{"url":"http://h/"}}`,
	`{"app":"a","name":"n","schedule":{"at":"9999-12-31T23:59:59.999999999+14:00"},"callback":{"url":"http://h/"}}`,
	`{"app":"a","name":"n","schedule":{"in":"9223372036854775807ns"},"callback":{"url":"http://h/"}}`,
	`{"app":"a","name":"n\u0000","schedule":{"every":"1s"},"callback":{"url":"http://h/\u2028"}}`,
	"{\"app\":\"a\",\"name\":\"\xff\xfe\",\"schedule\":{\"every\":\"1s\"},\"callback\":{\"url\":\"http://h/\"}}",
	`[]`, `null`, ``, `{`, `{"app":"a"}{}`, `{"app":"a",}`, `"x"`, `1e999`,
}

// FuzzCreateTimer feeds arbitrary bodies to POST /api/v1/timers on a real (SQLite) store:
// never a 5xx, always JSON, and every 4xx carries a code whose table status it has.
func FuzzCreateTimer(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	b := fuzzSetup(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		r := fuzzDo(t, b, http.MethodPost, "/api/v1/timers", body)
		if r.status == http.StatusCreated || r.status == http.StatusOK {
			var tm Timer
			r.decode(t, &tm)
			if tm.ID < 1 {
				t.Fatalf("created timer without id: %s", r.body)
			}
		}
	})
}

// FuzzPatchTimer does the same for PATCH /api/v1/timers/{id} on one existing timer.
func FuzzPatchTimer(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	for _, s := range []string{
		`{"name":"x"}`, `{"schedule":{"every":"5s"}}`, `{"callback":{"timeout":"1s"}}`,
		`{"retry":{"backoff":"2m"}}`, `{"callback":{"headers":{}}}`, `{}`, `{"enabled":true}`,
	} {
		f.Add([]byte(s))
	}
	b := fuzzSetup(f)
	body, _ := json.Marshal(timerBody("fuzz", "patched"))
	req := httptest.NewRequest(http.MethodPost, "/api/v1/timers", bytes.NewReader(body))
	rec := httptest.NewRecorder()
	b.h.ServeHTTP(rec, req)
	var tm Timer
	if err := json.Unmarshal(rec.Body.Bytes(), &tm); err != nil || rec.Code != http.StatusCreated {
		f.Fatalf("create: %d %s", rec.Code, rec.Body)
	}
	path := timerPath(tm.ID)
	f.Fuzz(func(t *testing.T, body []byte) {
		r := fuzzDo(t, b, http.MethodPatch, path, body)
		if r.status == http.StatusOK {
			var got Timer
			r.decode(t, &got)
			if got.ID != tm.ID {
				t.Fatalf("patched another timer: %s", r.body)
			}
		}
	})
}

func fuzzSetup(f *testing.F) *testBundle {
	return setup(f, daotest.SQLite(f), setupOpts{quiet: true})
}

func fuzzDo(t *testing.T, b *testBundle, method, path string, body []byte) response {
	req := httptest.NewRequest(method, path, bytes.NewReader(body))
	rec := httptest.NewRecorder()
	b.h.ServeHTTP(rec, req)
	r := response{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
	if r.status >= 500 {
		t.Fatalf("%s %s with %q: status %d: %s", method, path, body, r.status, r.body)
	}
	if !json.Valid(r.body) {
		t.Fatalf("%s with %q: not JSON: %q", method, body, r.body)
	}
	if r.status >= 400 {
		var e errorBody
		if err := json.Unmarshal(r.body, &e); err != nil || e.Error.Code == "" || e.Error.Message == "" {
			t.Fatalf("%s with %q: %d without error code: %s", method, body, r.status, r.body)
		}
		if statusOf(e.Error.Code) != r.status {
			t.Fatalf("%s with %q: code %s answered %d, table says %d", method, body, e.Error.Code, r.status, statusOf(e.Error.Code))
		}
		if strings.Contains(e.Error.Message, "dao:") {
			t.Fatalf("store error leaked to the client: %s", r.body)
		}
	}
	return r
}
