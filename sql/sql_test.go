package sql

import (
	"io/fs"
	"regexp"
	"testing"
)

// Every embedded file follows NNNN_name.sql and both dialects start with 0001_init.sql; the
// version bookkeeping itself is tested in package dao.
func TestMigrationsEmbedded(t *testing.T) {
	t.Parallel()
	name := regexp.MustCompile(`^[0-9]{4}_[a-z0-9_]+\.sql$`)
	for _, dir := range []string{"mysql", "sqlite"} {
		entries, err := fs.ReadDir(Migrations, dir)
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		if len(entries) == 0 || entries[0].Name() != "0001_init.sql" {
			t.Fatalf("%s: first file = %v, want 0001_init.sql", dir, entries)
		}
		for _, e := range entries {
			if !name.MatchString(e.Name()) {
				t.Errorf("%s/%s: want NNNN_lower_snake.sql", dir, e.Name())
			}
		}
	}
}
