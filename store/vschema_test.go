package store_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
)

// The Vitess VSchema (docs/vitess/vschema.json) must give every table of
// the schema a vindex, and the statements the store sends must filter on
// their tables' vindex columns, so that Vitess routes each to one shard.
// The statements are those the store's connections actually sent during
// this test binary's run (store.WithTrace, set by newStore and openStore): the
// SQL is assembled from fragments, so the sent text, not the constants, is
// what Vitess would see.

type vschema struct {
	Tables map[string]struct {
		ColumnVindexes []struct {
			Column string `json:"column"`
			Name   string `json:"name"`
		} `json:"column_vindexes"`
	} `json:"tables"`
}

// loadVSchema returns each table's sharding key: its first vindex column.
func loadVSchema() (map[string]string, error) {
	b, err := os.ReadFile("../docs/vitess/vschema.json")
	if err != nil {
		return nil, err
	}
	var v vschema
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("vschema.json: %w", err)
	}
	keys := map[string]string{}
	for name, tb := range v.Tables {
		if len(tb.ColumnVindexes) > 0 {
			keys[name] = tb.ColumnVindexes[0].Column
		}
	}
	return keys, nil
}

var createTableRE = regexp.MustCompile(`(?s)CREATE TABLE IF NOT EXISTS (\w+) \((.*?)\n\)`)

func TestVSchemaCoversSchema(t *testing.T) {
	keys, err := loadVSchema()
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob("../migrations/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	var schema []byte
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		schema = append(schema, b...)
	}
	tables := createTableRE.FindAllStringSubmatch(string(schema), -1)
	if len(tables) == 0 {
		t.Fatal("no CREATE TABLE in the migrations")
	}
	for _, m := range tables {
		name, body := m[1], m[2]
		col, ok := keys[name]
		if !ok {
			t.Errorf("table %s has no vindex in vschema.json", name)
			continue
		}
		if !regexp.MustCompile(`(?m)^\s+` + col + `\s`).MatchString(body) {
			t.Errorf("table %s: vindex column %s is not a column of the table", name, col)
		}
		delete(keys, name)
	}
	for name := range keys {
		t.Errorf("vschema.json names table %s, which the schema lacks", name)
	}
}

// testSQL marks the statements tests send themselves (mustExec, count):
// the routing check leaves them out.
const testSQL = "/* test */ "

// sent collects the distinct statements the store sent.
var sent sync.Map

func observe(query string) { sent.Store(strings.Join(strings.Fields(query), " "), true) }

// scatters are the statements that do not filter on their table's sharding
// key, each with why: per-database work (queue scans, retention, health,
// the layout records), which Vitess runs as scatter queries over its shards.
// docs/SHARDING.md ("When you outgrow hand-placed shards") lists them.
var scatters = []struct{ contains, why string }{
	{"FROM deliveries WHERE state", "claim scan of the delivery queue"},
	{"FROM fanout_tasks WHERE done = 0", "claim scan of the task queue"},
	{"FROM follow_events WHERE", "claim scan of the follow event queue"},
	{"FROM authors WHERE mode = 1", "claim scan of author switches"},
	{"FROM moves WHERE state", "claim scan of account moves"},
	{"following f FORCE INDEX (PRIMARY)", "a fan-out batch's range of users: one database's share here, every shard's on Vitess"},
	{"deliveries", "by content id: the author is known but not named (a lookup vindex on content_id, or author_id added to the WHERE, would route it)"},
	{"fanout_tasks", "by content id, as deliveries"},
	{"FROM posts WHERE content_id", "by content id, as deliveries"},
	{"UPDATE posts SET deleted = 1 WHERE content_id IN", "by content id, as deliveries"},
	{"health", "readiness probe row, one per database"},
	{"shard_map", "layout record, one per database"},
	{"identity", "database name record, one per database"},
	{"layout_fence", "reshard fence row, one per database"},
	{"reshard", "reshard state, one per database"},
	{"backdates", "backdate counter row, one per database"},
	{"goose_db_version", "migration bookkeeping"},
	{"FROM inbox LIMIT 1", "inbox engine conversion: whether a database's inbox holds rows"},
	{"_id BETWEEN ? AND ?", "feedd export: a range of user or author ids, one database's share here, every shard's on Vitess"},
}

var tableRefRE = regexp.MustCompile("(?i)\\b(?:FROM|JOIN|INTO|UPDATE)\\s+`?(\\w+)`?(?:\\s+(?:AS\\s+)?(\\w+))?")

// routes reports whether q filters each table it names on the table's
// key: `key = ?`, `key IN (`, a row constructor holding it compared with
// IN (Vitess routes each tuple by its vindex column), a join equality on
// it, or (for an INSERT) the key in its column list.
func routes(q string, keys map[string]string) (bool, string) {
	for _, m := range tableRefRE.FindAllStringSubmatch(q, -1) {
		table, alias := m[1], m[2]
		col, ok := keys[table]
		if !ok {
			continue
		}
		qual := `(?:\b` + table + `\.`
		if alias != "" && !slices.Contains([]string{"WHERE", "SET", "FORCE", "ON", "STRAIGHT_JOIN", "JOIN", "VALUES", "USE", "LIMIT", "ORDER", "GROUP", "SELECT"}, strings.ToUpper(alias)) {
			qual += `|\b` + alias + `\.`
		}
		qual += `|[\s(,])`
		filter := regexp.MustCompile(`(?i)` + qual + col + `\s*(?:=|IN\s*\()|=\s*\w+\.` + col + `\b`)
		tuple := regexp.MustCompile(`(?i)\((?:[^()]*,\s*)?` + col + `\s*(?:,[^()]*)?\)\s*IN\s*\(`)
		insert := regexp.MustCompile(`(?i)INTO\s+` + "`?" + table + "`?" + `\s*\([^)]*\b` + col + `\b`)
		if !filter.MatchString(q) && !tuple.MatchString(q) && !insert.MatchString(q) {
			return false, table
		}
	}
	return true, ""
}

// checkRouting fails the run (returns a report) when a statement sent
// during it neither routes on its keys nor is a declared scatter.
func checkRouting() string {
	keys, err := loadVSchema()
	if err != nil {
		return err.Error()
	}
	var bad []string
	sent.Range(func(k, _ any) bool {
		q := k.(string)
		if strings.HasPrefix(q, testSQL) || regexp.MustCompile(`(?i)^(CREATE|DROP|ALTER|SET|KILL|SHOW|EXPLAIN)\b`).MatchString(q) {
			return true
		}
		for _, s := range scatters {
			if strings.Contains(q, s.contains) {
				return true
			}
		}
		if ok, table := routes(q, keys); !ok {
			bad = append(bad, fmt.Sprintf("%s (table %s, key %s)", q, table, keys[table]))
		}
		return true
	})
	sort.Strings(bad)
	if len(bad) == 0 {
		return ""
	}
	return fmt.Sprintf("%d statements do not filter on their table's sharding key (docs/vitess/vschema.json):\n  %s\n",
		len(bad), strings.Join(bad, "\n  "))
}
