// Package api is tock's REST API: gin routes under /api/v1 over dao.Store, plus /healthz and
// /readyz.
//
// Requests. Bodies are read through http.MaxBytesReader (MaxBodyBytes, 413 beyond) and
// decoded strictly, one object at a time (decode.go): keys must match exactly, an unknown key
// is a 400 unknown_field naming its path ("callback.retries"), a value of the wrong JSON type
// a 400 invalid_field, JSON null counts as absent. Values are then validated and resolved
// against defaults or, for PATCH, against the stored timer (validate.go); well-typed but
// unacceptable values are 422 with a precise code and field. Limits match the columns in
// sql/, so no accepted request can fail in the store.
//
// Errors. Every error, unknown routes and wrong methods included, is
// {"error": {"code", "message", "field"}}; errorTable (errors.go) is the one map from error
// kinds (the API's validation codes, schedule.Error codes, dao sentinels) to status and code.
// Any other store error is a 503 store_unavailable: the request may be retried. A panic is
// recovered into a logged 500, which tests and the fuzz test show no input reaches.
//
// Changes. PATCH, enable and disable are read-modify-write under optimistic locking (the
// timer's version), retried a few times on a conflict. A change that changes nothing (enable
// of an enabled timer, an empty PATCH) writes nothing and keeps the version. After every
// committed change the EngineHook is told (before, after); its failure is only logged,
// because the store is the truth and the migrator re-stamps the index from it.
//
// Idempotent create. With request_id, the store keeps a SHA-256 of the resolved request
// (defaults filled in, durations in milliseconds, "in" kept relative), so the same request
// sent again, however formatted, answers 200 with the original timer, and a different
// request under the same key answers 409 idempotency_conflict.
//
// Lists are ordered by id; the cursor is the base64url of the last id of the page, and a page
// is read with limit+1 rows so the last page has an empty next_cursor.
package api
