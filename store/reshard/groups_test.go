package reshard

import (
	"testing"

	"github.com/feedhq/feed/store/storetest"
)

// TestInServer: a copy between two databases of one server stays in the
// server, into the target's schema; a copy to another server goes through
// the client, though a database of the same name is there.
func TestInServer(t *testing.T) {
	ctx := t.Context()
	shared, other := storetest.StartServer(t).DSN, storetest.StartServer(t).DSN
	r, _ := openReshard(t, map[string]string{"a": shared + "feed", "b": shared + "feed_b", "c": other + "feed_b"},
		"[{vshards: 0-511, database: a}, {vshards: 512-767, database: b}, {vshards: 768-1023, database: c}]")
	for to, want := range map[string]string{"b": "feed_b", "c": ""} {
		conn, schema, err := r.inServer(ctx, "a", to)
		if err != nil {
			t.Fatal(err)
		}
		if conn != nil {
			conn.Close()
		}
		if schema != want || (conn != nil) != (want != "") {
			t.Errorf("a to %s: schema %q (a connection: %v), want %q", to, schema, conn != nil, want)
		}
	}
}
