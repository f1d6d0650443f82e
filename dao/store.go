package dao

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"

	"github.com/jmoiron/sqlx"
	"github.com/jonboulle/clockwork"
)

// CONTRACT: every method takes ctx first; "now" always comes in as a parameter (NowMS), never
// from SQL NOW(), so the engine can run in virtual time.

// Options selects the backend: MySQL when MySQLDSN is set, else SQLite at SQLitePath.
type Options struct {
	MySQLDSN   string
	SQLitePath string
	// MaxOpenConns caps the connection pool. Default: 32 for MySQL, 8 for SQLite.
	MaxOpenConns int
	// Clock stamps schema_migrations.applied_ms, the one time the store reads itself.
	// Default: the real clock.
	Clock clockwork.Clock
}

// Store is the one storage API over MySQL/MariaDB and SQLite.
type Store struct {
	db      *sqlx.DB
	dialect string // "mysql" or "sqlite"
	clock   clockwork.Clock

	stmtMu sync.Mutex
	stmts  map[string]*sqlx.Stmt // prepared once, reused by every connection (prepared)
}

// Dialect names.
const (
	DialectMySQL  = "mysql"
	DialectSQLite = "sqlite"
)

// Open connects (creating the SQLite file and its directory if needed), checks the connection
// and does NOT migrate.
func Open(ctx context.Context, o Options) (*Store, error) {
	if o.Clock == nil {
		o.Clock = clockwork.NewRealClock()
	}
	var (
		db      *sqlx.DB
		dialect string
		err     error
	)
	switch {
	case o.MySQLDSN != "":
		dialect = DialectMySQL
		db, err = openMySQL(o)
	case o.SQLitePath != "":
		dialect = DialectSQLite
		db, err = openSQLite(o)
	default:
		return nil, errors.New("dao: open: neither a MySQL DSN nor a SQLite path is set")
	}
	if err != nil {
		return nil, fmt.Errorf("dao: open %s: %w", dialect, err)
	}
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("dao: open %s: ping: %w", dialect, err)
	}
	return &Store{db: db, dialect: dialect, clock: o.Clock}, nil
}

// Close closes the connection pool.
func (s *Store) Close() error {
	s.stmtMu.Lock()
	for _, st := range s.stmts {
		_ = st.Close()
	}
	s.stmts = nil
	s.stmtMu.Unlock()
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("dao: close: %w", err)
	}
	return nil
}

// Ping checks that the database answers (readiness).
func (s *Store) Ping(ctx context.Context) error {
	if err := s.db.PingContext(ctx); err != nil {
		return fmt.Errorf("dao: ping %s: %w", s.dialect, err)
	}
	return nil
}

// Dialect returns "mysql" or "sqlite".
func (s *Store) Dialect() string { return s.dialect }

// DB exposes the pool for tests and tools; application code goes through the methods.
func (s *Store) DB() *sqlx.DB { return s.db }

// getRow reads the single row of query into a T: ErrNotFound when there is none, other
// errors wrapped with what and the first argument ("dao: get timer 42: ...").
func getRow[T any](ctx context.Context, q queryer, what, query string, args ...any) (T, error) {
	var row T
	err := q.GetContext(ctx, &row, query, args...)
	if errors.Is(err, sql.ErrNoRows) {
		var zero T
		return zero, ErrNotFound
	}
	if err != nil {
		var zero T
		return zero, fmt.Errorf("dao: %s %v: %w", what, args[0], err)
	}
	return row, nil
}
