// Package sql holds tock's versioned schema migrations, one directory per SQL dialect
// (mysql/, sqlite/), embedded into the binary. dao.Store.Migrate applies them.
//
// Each file is named NNNN_description.sql; NNNN is the version, applied in ascending order and
// recorded in table schema_migrations. A file holds one or more statements separated by ';'
// (the migrator splits them itself, outside string literals and -- comments, so the MySQL
// driver needs no multiStatements). A new schema change is a new file with the next number in
// BOTH directories; never edit a file that has been released.
//
// MySQL commits each DDL statement on its own, so a MySQL file that fails halfway stays half
// applied and is run again from its first statement at the next start: write its statements
// to be re-runnable (CREATE ... IF NOT EXISTS, ADD COLUMN IF NOT EXISTS on MariaDB, or one
// ALTER per file). SQLite applies a whole file in one transaction.
//
// Importers alias the package, e.g. `tocksql "github.com/tockd/tock/sql"`, since its name
// shadows database/sql.
package sql

import "embed"

// Migrations holds mysql/*.sql and sqlite/*.sql.
//
//go:embed mysql/*.sql sqlite/*.sql
var Migrations embed.FS
