package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"slices"

	"github.com/gin-gonic/gin"
)

// MaxBodyBytes caps a request body; a larger one is answered 413.
const MaxBodyBytes = 64 << 10

// readBody reads the request body through http.MaxBytesReader.
func readBody(c *gin.Context) ([]byte, error) { return readBodyMax(c, MaxBodyBytes) }

// readBodyMax reads at most max bytes of body.
func readBodyMax(c *gin.Context, max int64) ([]byte, error) {
	b, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, max))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, newError(codeBodyTooLarge, "", "the request body is larger than %d bytes", max)
		}
		return nil, newError(codeInvalidJSON, "", "reading the request body: %v", err)
	}
	return b, nil
}

// object is one JSON object being decoded strictly: keys must be known and match exactly
// (encoding/json would match struct fields case-insensitively and cannot name the path of an
// unknown field), and each value must have the expected type. Path names the object in error
// fields ("" for the body, "callback" for a nested one).
type object struct {
	path string
	m    map[string]json.RawMessage
}

// parseBody decodes the body as one JSON object and nothing else.
func parseBody(body []byte) (object, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return object{}, newError(codeInvalidJSON, "", "the request body is empty; send a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	var m map[string]json.RawMessage
	if err := dec.Decode(&m); err != nil {
		return object{}, jsonError(err)
	}
	if m == nil {
		return object{}, newError(codeInvalidJSON, "", "the request body must be a JSON object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return object{}, newError(codeInvalidJSON, "", "unexpected data after the JSON object")
	}
	return object{m: m}, nil
}

func jsonError(err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return newError(codeInvalidJSON, "", "malformed JSON at byte %d: %v", se.Offset, err)
	case errors.As(err, &te):
		return newError(codeInvalidJSON, "", "the request body must be a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return newError(codeInvalidJSON, "", "the JSON ends unexpectedly")
	}
	return newError(codeInvalidJSON, "", "malformed JSON: %v", err)
}

func (o object) fieldPath(name string) string {
	if o.path == "" {
		return name
	}
	return o.path + "." + name
}

// only fails with unknown_field when o has a key outside known (the first in sorted order, so
// the answer is deterministic).
func (o object) only(known ...string) error {
	var unknown []string
	for k := range o.m {
		if !slices.Contains(known, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	f := o.fieldPath(unknown[0])
	return newError(codeUnknownField, f, "unknown field %q", f)
}

// raw returns the value of key; null counts as absent.
func (o object) raw(key string) (json.RawMessage, bool) {
	v, ok := o.m[key]
	if !ok || string(bytes.TrimSpace(v)) == "null" {
		return nil, false
	}
	return v, true
}

// str decodes an optional string field.
func (o object) str(key string) (*string, error) {
	v, ok := o.raw(key)
	if !ok {
		return nil, nil
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return nil, newError(codeInvalidField, o.fieldPath(key), "must be a string")
	}
	return &s, nil
}

// boolean decodes an optional boolean field.
func (o object) boolean(key string) (*bool, error) {
	v, ok := o.raw(key)
	if !ok {
		return nil, nil
	}
	var b bool
	if err := json.Unmarshal(v, &b); err != nil {
		return nil, newError(codeInvalidField, o.fieldPath(key), "must be true or false")
	}
	return &b, nil
}

// integer decodes an optional integer field (no fraction, no exponent, within int32 so it is
// the same on every platform and column).
func (o object) integer(key string) (*int, error) {
	v, ok := o.raw(key)
	if !ok {
		return nil, nil
	}
	var n int32
	if err := json.Unmarshal(v, &n); err != nil {
		return nil, newError(codeInvalidField, o.fieldPath(key), "must be an integer")
	}
	i := int(n)
	return &i, nil
}

// obj decodes an optional nested object.
func (o object) obj(key string) (*object, error) {
	v, ok := o.raw(key)
	if !ok {
		return nil, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(v, &m); err != nil {
		return nil, newError(codeInvalidField, o.fieldPath(key), "must be an object")
	}
	return &object{path: o.fieldPath(key), m: m}, nil
}

// stringMap decodes an optional object of strings.
func (o object) stringMap(key string) (map[string]string, bool, error) {
	inner, err := o.obj(key)
	if err != nil || inner == nil {
		return nil, false, err
	}
	out := make(map[string]string, len(inner.m))
	for _, k := range slices.Sorted(maps.Keys(inner.m)) {
		var s string
		if err := json.Unmarshal(inner.m[k], &s); err != nil {
			return nil, false, newError(codeInvalidField, inner.fieldPath(k), "must be a string")
		}
		out[k] = s
	}
	return out, true, nil
}
