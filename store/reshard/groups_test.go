package reshard

import (
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"github.com/feedhq/feed/store/storetest"
)

// TestInServer: a copy between two databases of one server stays in the
// server, into the target's schema; a copy to another server goes through
// the client, though a database of the same name is there, and so does a
// copy whose source user may read the target but not write it.
func TestInServer(t *testing.T) {
	ctx := t.Context()
	shared, other := storetest.StartServer(t).DSN, storetest.StartServer(t).DSN
	r, dbs := openReshard(t, map[string]string{"a": shared + "feed", "b": shared + "feed_b", "c": other + "feed_b"},
		"[{vshards: 0-511, database: a}, {vshards: 512-767, database: b}, {vshards: 768-1023, database: c}]")
	check := func(r *Reshard, to, want string) {
		t.Helper()
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
	check(r, "b", "feed_b")
	check(r, "c", "")

	for _, q := range []string{
		"CREATE USER reader@'%' IDENTIFIED BY 'pw'",
		"GRANT ALL ON feed.* TO reader@'%'",
		"GRANT SELECT ON feed_b.* TO reader@'%'",
	} {
		if _, err := dbs["a"].ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	c, err := mysql.ParseDSN(shared + "feed")
	if err != nil {
		t.Fatal(err)
	}
	c.User, c.Passwd = "reader", "pw"
	reader, err := sqlx.Open("mysql", c.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	check(&Reshard{dbs: map[string]*sqlx.DB{"a": reader, "b": dbs["b"]}}, "b", "")
}
