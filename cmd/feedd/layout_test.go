package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/feedhq/feed/store/storetest"
)

// TestServeRefusesMovedLayout edits sharding.yaml as a DBA might, moving
// virtual shards 768-1023 to a new, empty database: feedd refuses to start
// instead of serving feeds from a database that does not hold their rows,
// and says which ranges differ; `migrate` refuses too.
func TestServeRefusesMovedLayout(t *testing.T) {
	t.Parallel()
	dsnA, dsnB, dsnC := storetest.DatabaseDSN(t), storetest.DatabaseDSN(t), storetest.DatabaseDSN(t)
	write := func(yaml string) string {
		path := filepath.Join(t.TempDir(), "sharding.yaml")
		must(t, os.WriteFile(path, []byte(yaml), 0o600))
		return path
	}
	two := write(fmt.Sprintf("virtual_shards: 1024\ndatabases:\n  a: {dsn: %q}\n  b: {dsn: %q}\nranges:\n  - {vshards: 0-511, database: a}\n  - {vshards: 512-1023, database: b}\n", dsnA, dsnB))
	three := write(fmt.Sprintf("virtual_shards: 1024\ndatabases:\n  a: {dsn: %q}\n  b: {dsn: %q}\n  c: {dsn: %q}\nranges:\n  - {vshards: 0-511, database: a}\n  - {vshards: 512-767, database: b}\n  - {vshards: 768-1023, database: c}\n", dsnA, dsnB, dsnC))

	m, _ := startMain(t, "serve", "--sharding", two, "--http-addr", "127.0.0.1:0", "--workers=false")
	must(t, m.Close())

	for _, cmd := range []string{"serve", "migrate"} {
		m := NewMain()
		m.Stderr = &syncBuffer{}
		must(t, m.ParseFlags([]string{cmd, "--sharding", three, "--http-addr", "127.0.0.1:0"}))
		err := m.Run(t.Context())
		m.Close()
		if err == nil || !strings.Contains(err.Error(), "vshards 768-1023 are on b, the file puts them on c") {
			t.Errorf("%s with moved ranges: %v, want a refusal naming vshards 768-1023", cmd, err)
		}
	}
	// The original file still starts.
	startMain(t, "serve", "--sharding", two, "--http-addr", "127.0.0.1:0", "--workers=false")
}
