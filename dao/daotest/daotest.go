// Package daotest gives tests migrated stores: SQLite in a temporary directory always, and
// MariaDB/MySQL in a fresh database of its own when TOCK_TEST_MYSQL_DSN is set (e.g.
// "root@tcp(127.0.0.1:3306)/test"). Without that variable the MySQL variant is skipped with a
// visible reason, except under CI (env CI non-empty), where it fails instead.
package daotest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/tockd/tock/dao"
)

// EnvMySQLDSN names the variable holding the DSN of a MySQL server tests may create
// databases on.
const EnvMySQLDSN = "TOCK_TEST_MYSQL_DSN"

// NamedStore is a migrated store and its backend's name ("sqlite" or "mysql").
type NamedStore struct {
	Name  string
	Store *dao.Store
}

// ForEachStore runs fn as a parallel subtest per backend ("sqlite", "mysql"), each with its
// own migrated store. The mysql subtest skips (or fails under CI) when no server is set.
func ForEachStore(t *testing.T, fn func(t *testing.T, s *dao.Store)) {
	t.Helper()
	t.Run(dao.DialectSQLite, func(t *testing.T) {
		t.Parallel()
		fn(t, SQLite(t))
	})
	t.Run(dao.DialectMySQL, func(t *testing.T) {
		t.Parallel()
		fn(t, MySQL(t))
	})
}

// Stores returns a migrated SQLite store and, when TOCK_TEST_MYSQL_DSN is set, a migrated
// MySQL store. Without the variable it logs why MySQL is left out (fails under CI). Prefer
// ForEachStore, whose skip shows per subtest.
func Stores(t testing.TB) []NamedStore {
	t.Helper()
	out := []NamedStore{{Name: dao.DialectSQLite, Store: SQLite(t)}}
	if os.Getenv(EnvMySQLDSN) == "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s not set (required under CI)", EnvMySQLDSN)
		}
		t.Logf("mysql store left out: %s not set", EnvMySQLDSN)
		return out
	}
	return append(out, NamedStore{Name: dao.DialectMySQL, Store: MySQL(t)})
}

// SQLite opens and migrates a store in t.TempDir(), closed in t.Cleanup.
func SQLite(t testing.TB) *dao.Store {
	t.Helper()
	return open(t, dao.Options{SQLitePath: filepath.Join(t.TempDir(), "tock.db")})
}

// MySQL opens and migrates a store on a fresh database (see MySQLDSN), closed in t.Cleanup
// before the database is dropped.
func MySQL(t testing.TB) *dao.Store {
	t.Helper()
	return open(t, dao.Options{MySQLDSN: MySQLDSN(t)})
}

func open(t testing.TB, o dao.Options) *dao.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := dao.Open(ctx, o)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return s
}

// MySQLDSN creates an empty database tock_t_<random hex> on the server of
// TOCK_TEST_MYSQL_DSN, drops it in t.Cleanup, and returns the DSN that selects it. It skips
// the test when the variable is unset (fails under CI) and fails when the server is
// unreachable.
func MySQLDSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv(EnvMySQLDSN)
	if dsn == "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s not set (required under CI)", EnvMySQLDSN)
		}
		t.Skipf("%s not set", EnvMySQLDSN)
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatalf("%s: %v", EnvMySQLDSN, err)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatalf("%s: %v", EnvMySQLDSN, err)
	}
	admin := sql.OpenDB(conn)
	admin.SetMaxOpenConns(1)

	var b [8]byte
	_, _ = rand.Read(b[:])
	name := "tock_t_" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE `"+name+"` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
		_ = admin.Close()
		t.Fatalf("mysql at %s unreachable or unusable (%s): create database: %v", cfg.Addr, EnvMySQLDSN, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
			t.Errorf("drop test database %s: %v", name, err)
		}
		_ = admin.Close()
	})
	cfg.DBName = name
	return cfg.FormatDSN()
}
