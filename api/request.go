package api

import (
	"github.com/tockd/tock/schedule"
)

// createRequest is the decoded body of POST /timers; nil means "not given".
type createRequest struct {
	App       *string
	Name      *string
	Schedule  *schedule.Spec
	Callback  *callbackInput
	Retry     *retryInput
	Misfire   *string
	Enabled   *bool
	RequestID *string
}

// patchRequest is the decoded body of PATCH /timers/{id}.
type patchRequest struct {
	Name     *string
	Schedule *schedule.Spec
	Callback *callbackInput
	Retry    *retryInput
	Misfire  *string
}

func (p patchRequest) empty() bool {
	return p.Name == nil && p.Schedule == nil && p.Callback == nil && p.Retry == nil && p.Misfire == nil
}

type callbackInput struct {
	URL     *string
	Method  *string
	Headers map[string]string // set when HeadersGiven
	Body    *string
	Timeout *string

	HeadersGiven bool
}

type retryInput struct {
	MaxAttempts *int
	Backoff     *string
	MaxBackoff  *string
}

func decodeCreate(body []byte) (createRequest, error) {
	var r createRequest
	o, err := parseBody(body)
	if err != nil {
		return r, err
	}
	if err := o.only("app", "name", "schedule", "callback", "retry", "misfire", "enabled", "request_id"); err != nil {
		return r, err
	}
	if r.App, err = o.str("app"); err != nil {
		return r, err
	}
	if r.Name, err = o.str("name"); err != nil {
		return r, err
	}
	if r.Schedule, err = decodeSchedule(o); err != nil {
		return r, err
	}
	if r.Callback, err = decodeCallback(o); err != nil {
		return r, err
	}
	if r.Retry, err = decodeRetry(o); err != nil {
		return r, err
	}
	if r.Misfire, err = o.str("misfire"); err != nil {
		return r, err
	}
	if r.Enabled, err = o.boolean("enabled"); err != nil {
		return r, err
	}
	if r.RequestID, err = o.str("request_id"); err != nil {
		return r, err
	}
	return r, nil
}

func decodePatch(body []byte) (patchRequest, error) {
	var r patchRequest
	o, err := parseBody(body)
	if err != nil {
		return r, err
	}
	if err := o.only("name", "schedule", "callback", "retry", "misfire"); err != nil {
		return r, err
	}
	if r.Name, err = o.str("name"); err != nil {
		return r, err
	}
	if r.Schedule, err = decodeSchedule(o); err != nil {
		return r, err
	}
	if r.Callback, err = decodeCallback(o); err != nil {
		return r, err
	}
	if r.Retry, err = decodeRetry(o); err != nil {
		return r, err
	}
	if r.Misfire, err = o.str("misfire"); err != nil {
		return r, err
	}
	return r, nil
}

func decodeSchedule(parent object) (*schedule.Spec, error) {
	o, err := parent.obj("schedule")
	if err != nil || o == nil {
		return nil, err
	}
	if err := o.only("cron", "timezone", "every", "at", "in"); err != nil {
		return nil, err
	}
	var s schedule.Spec
	for _, f := range []struct {
		key string
		dst *string
	}{{"cron", &s.Cron}, {"timezone", &s.Timezone}, {"every", &s.Every}, {"at", &s.At}, {"in", &s.In}} {
		v, err := o.str(f.key)
		if err != nil {
			return nil, err
		}
		if v != nil {
			*f.dst = *v
		}
	}
	return &s, nil
}

func decodeCallback(parent object) (*callbackInput, error) {
	o, err := parent.obj("callback")
	if err != nil || o == nil {
		return nil, err
	}
	if err := o.only("url", "method", "headers", "body", "timeout"); err != nil {
		return nil, err
	}
	var c callbackInput
	if c.URL, err = o.str("url"); err != nil {
		return nil, err
	}
	if c.Method, err = o.str("method"); err != nil {
		return nil, err
	}
	if c.Headers, c.HeadersGiven, err = o.stringMap("headers"); err != nil {
		return nil, err
	}
	if c.Body, err = o.str("body"); err != nil {
		return nil, err
	}
	if c.Timeout, err = o.str("timeout"); err != nil {
		return nil, err
	}
	return &c, nil
}

func decodeRetry(parent object) (*retryInput, error) {
	o, err := parent.obj("retry")
	if err != nil || o == nil {
		return nil, err
	}
	if err := o.only("max_attempts", "backoff", "max_backoff"); err != nil {
		return nil, err
	}
	var r retryInput
	if r.MaxAttempts, err = o.integer("max_attempts"); err != nil {
		return nil, err
	}
	if r.Backoff, err = o.str("backoff"); err != nil {
		return nil, err
	}
	if r.MaxBackoff, err = o.str("max_backoff"); err != nil {
		return nil, err
	}
	return &r, nil
}
