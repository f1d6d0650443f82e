package api

import (
	"encoding/base64"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"
)

// Page sizes of the list endpoints.
const (
	DefaultLimit = 100
	MaxLimit     = 1000
)

// query parses the query string strictly: URL.Query drops malformed pairs silently, which
// would turn a mistyped filter into no filter.
func query(rawQuery string) (url.Values, error) {
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return nil, newError(codeInvalidQuery, "", "malformed query string: %v", err)
	}
	return q, nil
}

type page struct {
	limit   int
	afterID int64
}

// parsePage reads limit and cursor. The cursor is opaque to clients: base64url of the last id
// of the previous page. Lists are ordered by id, so a page never repeats or skips an item
// that existed when the walk began.
func parsePage(q url.Values) (page, error) {
	p := page{limit: DefaultLimit}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxLimit {
			return p, newError(codeInvalidLimit, "limit", "limit must be an integer from 1 to %d", MaxLimit)
		}
		p.limit = n
	}
	if s := q.Get("cursor"); s != "" {
		id, ok := decodeCursor(s)
		if !ok {
			return p, newError(codeInvalidCursor, "cursor", "cursor is not one this API returned")
		}
		p.afterID = id
	}
	return p, nil
}

func encodeCursor(id int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(id, 10)))
}

func decodeCursor(s string) (int64, bool) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return 0, false
	}
	id, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil || id < 1 || encodeCursor(id) != s {
		return 0, false
	}
	return id, true
}

// listPage is the response of a list endpoint from rows fetched with limit+1: at most limit
// items in their JSON form, and the cursor of the next page ("" when this is the last).
func listPage[R, V any](rows []R, limit int, id func(R) int64, view func(R) V) List[V] {
	next := ""
	if len(rows) > limit {
		rows = rows[:limit]
		next = encodeCursor(id(rows[limit-1]))
	}
	out := List[V]{Items: make([]V, 0, len(rows)), NextCursor: next}
	for _, r := range rows {
		out.Items = append(out.Items, view(r))
	}
	return out
}

// listQuery is what every list endpoint reads first: the query string, the page, and an
// optional status that must be one of the endpoint's statuses.
type listQuery struct {
	values url.Values
	page   page
	status string
}

// readListQuery parses the common part of a list request, answering the error itself when
// it fails (ok false).
func (a *API) readListQuery(c *gin.Context, statuses []string) (lq listQuery, ok bool) {
	q, err := query(c.Request.URL.RawQuery)
	if err == nil {
		lq.page, err = parsePage(q)
	}
	if err != nil {
		a.fail(c, err)
		return lq, false
	}
	lq.values, lq.status = q, q.Get("status")
	if lq.status != "" && !slices.Contains(statuses, lq.status) {
		a.fail(c, newError(codeInvalidStatus, "status", "status must be one of %s", strings.Join(statuses, ", ")))
		return lq, false
	}
	return lq, true
}

// readApp reads the optional app filter of a list request.
func (a *API) readApp(c *gin.Context, q url.Values) (string, bool) {
	app := q.Get("app")
	if app != "" && !appPattern.MatchString(app) {
		a.fail(c, newError(codeInvalidApp, "app", "app must be 1 to 64 characters of a-z, 0-9, _ and -"))
		return "", false
	}
	return app, true
}
