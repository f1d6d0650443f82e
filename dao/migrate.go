package dao

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"

	tocksql "github.com/tockd/tock/sql"
)

// queryer is what both a transaction and a single connection offer.
type queryer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	GetContext(ctx context.Context, dest any, query string, args ...any) error
	SelectContext(ctx context.Context, dest any, query string, args ...any) error
}

// Migration is one versioned schema file.
type Migration struct {
	Version int64
	Name    string // file name without version and extension, e.g. "init"
	SQL     string
}

// Migrations lists the embedded migrations of a dialect in version order.
func Migrations(dialect string) ([]Migration, error) {
	return loadMigrations(tocksql.Migrations, dialect)
}

func loadMigrations(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("dao: read migrations %s: %w", dir, err)
	}
	var out []Migration
	seen := map[int64]string{}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		base := strings.TrimSuffix(e.Name(), ".sql")
		num, name, ok := strings.Cut(base, "_")
		v, err := strconv.ParseInt(num, 10, 64)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("dao: migration file %s/%s: want NNNN_name.sql", dir, e.Name())
		}
		if prev, dup := seen[v]; dup {
			return nil, fmt.Errorf("dao: migration version %d twice: %s and %s", v, prev, e.Name())
		}
		seen[v] = e.Name()
		b, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("dao: read migration %s: %w", e.Name(), err)
		}
		out = append(out, Migration{Version: v, Name: name, SQL: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// Migrate applies the versioned files of sql/<dialect>/ not yet applied, idempotently and
// safely when several instances start at once.
func (s *Store) Migrate(ctx context.Context) error {
	migs, err := Migrations(s.dialect)
	if err != nil {
		return err
	}
	err = s.lockMigrations(ctx, func(q queryer) error {
		if _, err := q.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
  version    BIGINT       NOT NULL PRIMARY KEY,
  name       VARCHAR(255) NOT NULL,
  applied_ms BIGINT       NOT NULL
)`); err != nil {
			return fmt.Errorf("create schema_migrations: %w", err)
		}
		var done []int64
		if err := q.SelectContext(ctx, &done, "SELECT version FROM schema_migrations"); err != nil {
			return fmt.Errorf("read schema_migrations: %w", err)
		}
		applied := make(map[int64]bool, len(done))
		for _, v := range done {
			applied[v] = true
		}
		for _, m := range migs {
			if applied[m.Version] {
				continue
			}
			for i, stmt := range splitStatements(m.SQL) {
				if _, err := q.ExecContext(ctx, stmt); err != nil {
					return fmt.Errorf("migration %04d_%s statement %d: %w", m.Version, m.Name, i+1, err)
				}
			}
			if _, err := q.ExecContext(ctx, "INSERT INTO schema_migrations (version, name, applied_ms) VALUES (?, ?, ?)",
				m.Version, m.Name, s.clock.Now().UnixMilli()); err != nil {
				return fmt.Errorf("record migration %04d_%s: %w", m.Version, m.Name, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("dao: migrate %s: %w", s.dialect, err)
	}
	return nil
}

// AppliedMigrations returns the versions recorded in schema_migrations, ascending.
func (s *Store) AppliedMigrations(ctx context.Context) ([]int64, error) {
	var vs []int64
	if err := s.db.SelectContext(ctx, &vs, "SELECT version FROM schema_migrations ORDER BY version"); err != nil {
		return nil, fmt.Errorf("dao: applied migrations: %w", err)
	}
	return vs, nil
}

// splitStatements cuts a migration file at the semicolons that end statements, skipping
// those inside quotes ('...', "...", `...`) and comments (-- to end of line, /* ... */).
// Comment-only and empty pieces are dropped.
func splitStatements(src string) []string {
	var (
		out   []string
		cur   strings.Builder
		quote byte // the open quote character, 0 outside quotes
		code  bool // cur holds something besides comments and blanks
	)
	flush := func() {
		if code {
			out = append(out, strings.TrimSpace(cur.String()))
		}
		cur.Reset()
		code = false
	}
	for i := 0; i < len(src); i++ {
		c := src[i]
		switch {
		case quote != 0:
			cur.WriteByte(c)
			if c == '\\' && quote != '`' && i+1 < len(src) {
				i++
				cur.WriteByte(src[i])
			} else if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"' || c == '`':
			quote = c
			code = true
			cur.WriteByte(c)
		case c == '-' && strings.HasPrefix(src[i:], "--"):
			end := strings.IndexByte(src[i:], '\n')
			if end < 0 {
				end = len(src) - i
			}
			i += end - 1 // the newline itself is written by the next iteration
		case c == '/' && strings.HasPrefix(src[i:], "/*"):
			end := strings.Index(src[i+2:], "*/")
			if end < 0 {
				i = len(src)
			} else {
				i += 2 + end + 1
			}
			cur.WriteByte(' ')
		case c == ';':
			flush()
		default:
			if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
				code = true
			}
			cur.WriteByte(c)
		}
	}
	flush()
	return out
}
