package dao

import (
	"reflect"
	"strings"
	"testing"
	"testing/fstest"
)

func TestSplitStatements(t *testing.T) {
	t.Parallel()
	src := `-- header; with a semicolon
CREATE TABLE a (x TEXT DEFAULT ';', y TEXT DEFAULT 'it''s; \'q\'');
/* block; comment */ CREATE INDEX i ON a (x);

-- only a comment;
INSERT INTO a VALUES ("b;c", ` + "`d;e`" + `)`
	got := splitStatements(src)
	want := []string{
		`CREATE TABLE a (x TEXT DEFAULT ';', y TEXT DEFAULT 'it''s; \'q\'')`,
		`CREATE INDEX i ON a (x)`,
		"INSERT INTO a VALUES (\"b;c\", `d;e`)",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("splitStatements =\n%q\nwant\n%q", got, want)
	}
	if got := splitStatements("  \n-- nothing\n;;"); len(got) != 0 {
		t.Fatalf("empty input split into %q", got)
	}
}

func TestLoadMigrations(t *testing.T) {
	t.Parallel()
	fsys := fstest.MapFS{
		"d/0002_next.sql": {Data: []byte("B")},
		"d/0001_init.sql": {Data: []byte("A")},
		"d/README.md":     {Data: []byte("ignored")},
	}
	got, err := loadMigrations(fsys, "d")
	if err != nil {
		t.Fatal(err)
	}
	want := []Migration{{1, "init", "A"}, {2, "next", "B"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("loadMigrations = %+v, want %+v", got, want)
	}
	for name, fsys := range map[string]fstest.MapFS{
		"no number": {"d/init.sql": {}},
		"duplicate": {"d/0001_a.sql": {}, "d/1_b.sql": {}},
		"zero":      {"d/0000_a.sql": {}},
	} {
		if _, err := loadMigrations(fsys, "d"); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// Both dialects must carry the same versions, so a new migration is never added to one only.
func TestMigrationsMatchAcrossDialects(t *testing.T) {
	t.Parallel()
	my, err := Migrations(DialectMySQL)
	if err != nil {
		t.Fatal(err)
	}
	lite, err := Migrations(DialectSQLite)
	if err != nil {
		t.Fatal(err)
	}
	if len(my) != len(lite) {
		t.Fatalf("%d mysql migrations, %d sqlite", len(my), len(lite))
	}
	for i := range my {
		if my[i].Version != lite[i].Version || my[i].Name != lite[i].Name {
			t.Errorf("migration %d: mysql %04d_%s, sqlite %04d_%s", i, my[i].Version, my[i].Name, lite[i].Version, lite[i].Name)
		}
	}
}

func TestTruncate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"", 3, ""},
		{"abc", 3, "abc"},
		{"abcd", 3, "abc"},
		{"héllo", 2, "hé"},
		{"🙂🙂🙂", 2, "🙂🙂"},
		{"a\xffb", 3, "a\uFFFDb"},
		{"a\xff\xfeb", 2, "a\uFFFD"},
		{strings.Repeat("x", 2000), 1024, strings.Repeat("x", 1024)},
	} {
		if got := truncate(tc.in, tc.n); got != tc.want {
			t.Errorf("truncate(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}
