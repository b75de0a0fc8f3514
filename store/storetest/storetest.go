// Package storetest gives integration tests a real MySQL-family server,
// fresh, uniquely named databases on it and throwaway mariadbd servers of
// their own (internal/dbserver, bound to the test here); store/storeload
// fills the databases in bulk. The server comes from
// FEED_TEST_MYSQL_DSN (a DSN without a database name, as `make test` sets
// it), else from a MySQL 8.4 testcontainer when Docker answers. With neither
// the test fails: a test that cannot reach a database must never pass.
package storetest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"
	"github.com/testcontainers/testcontainers-go"
	tcmysql "github.com/testcontainers/testcontainers-go/modules/mysql"

	"github.com/feedhq/feed/store"
	"github.com/feedhq/feed/store/shardmap"
)

// EnvDSN names the variable holding the test server's DSN.
const EnvDSN = "FEED_TEST_MYSQL_DSN"

// EnvEngine names the variable choosing the inbox engine of the stores
// tests get (store.ParseEngine: innodb, the default, or rocksdb, which
// needs a server started with deploy/rocksdb.cnf).
const EnvEngine = "FEED_TEST_INBOX_ENGINE"

// InboxEngine is the inbox engine of the tests' stores, from EnvEngine.
// A test that builds its own ShardMap sets it there.
func InboxEngine(t testing.TB) store.Engine {
	t.Helper()
	e, err := store.ParseEngine(os.Getenv(EnvEngine))
	if err != nil {
		t.Fatalf("storetest: %s: %v", EnvEngine, err)
	}
	return e
}

var (
	serverOnce sync.Once
	serverDSN  string
	serverTiDB bool
	serverErr  error
)

// ServerDSN returns the DSN of the test server with no database name.
func ServerDSN(t testing.TB) string {
	t.Helper()
	serverOnce.Do(func() {
		if serverDSN, serverErr = discover(); serverErr == nil {
			serverTiDB, serverErr = isTiDB(serverDSN)
		}
		if serverErr == nil && !serverTiDB {
			raiseConnections(serverDSN) // TiDB's 0 is no limit
		}
	})
	if serverErr != nil {
		t.Fatalf("storetest: no MySQL server: %v", serverErr)
	}
	return serverDSN
}

// TiDB reports whether the test server is TiDB. Tests of what an engine
// does beyond the SQL the store relies on (EXPLAIN's output, lock waits
// seen in information_schema, SKIP LOCKED) check TiDB's own behaviour there.
func TiDB(t testing.TB) bool {
	t.Helper()
	ServerDSN(t)
	return serverTiDB
}

// minConnections is what the tests of one `go test ./...` can hold of the
// server at once: test packages run in parallel, each test with its own
// stores and pools. Below it (151 is MariaDB's and MySQL's default) a busy
// moment fails tests with error 1040, too many connections.
const minConnections = 500

// raiseConnections raises the server's max_connections to minConnections,
// best effort: a user without the privilege, or a server without the
// setting, keeps what it has.
func raiseConnections(dsn string) {
	db, err := sqlx.Open("mysql", dsn)
	if err != nil {
		return
	}
	defer db.Close()
	_, _ = db.Exec(fmt.Sprintf("SET GLOBAL max_connections = GREATEST(@@max_connections, %d)", minConnections))
}

func isTiDB(dsn string) (bool, error) {
	db, err := sqlx.Open("mysql", dsn)
	if err != nil {
		return false, err
	}
	defer db.Close()
	return store.IsTiDB(context.Background(), db)
}

func discover() (string, error) {
	if dsn := os.Getenv(EnvDSN); dsn != "" {
		return dsn, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	provider, err := testcontainers.NewDockerProvider()
	if err == nil {
		err = provider.Health(ctx)
	}
	if err != nil {
		return "", fmt.Errorf("%s is not set and Docker does not answer (%v); run `make test`, which starts a local server", EnvDSN, err)
	}
	// The container lives as long as the test binary; Ryuk removes it.
	c, err := tcmysql.Run(ctx, "mysql:8.4", tcmysql.WithDatabase("feed"), tcmysql.WithUsername("root"), tcmysql.WithPassword("feed"))
	if err != nil {
		return "", fmt.Errorf("start mysql:8.4 container: %w", err)
	}
	dsn, err := c.ConnectionString(ctx)
	if err != nil {
		return "", err
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "", err
	}
	cfg.DBName = ""
	return cfg.FormatDSN(), nil
}

// DatabaseDSN returns a DSN for a new database named after the test, created
// empty and dropped when the test ends.
func DatabaseDSN(t testing.TB) string {
	t.Helper()
	server := ServerDSN(t)
	cfg, err := mysql.ParseDSN(server)
	if err != nil {
		t.Fatalf("storetest: bad %s: %v", EnvDSN, err)
	}
	cfg.DBName = uniqueName(t.Name())
	admin, err := sql.Open("mysql", server)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	// Schema names cannot be placeholders; uniqueName yields [a-z0-9_] only.
	if _, err := admin.Exec("CREATE DATABASE `" + cfg.DBName + "`"); err != nil {
		t.Fatalf("storetest: create database: %v", err)
	}
	t.Cleanup(func() {
		admin, err := sql.Open("mysql", server)
		if err != nil {
			t.Errorf("storetest: drop database: %v", err)
			return
		}
		defer admin.Close()
		if _, err := admin.Exec("DROP DATABASE IF EXISTS `" + cfg.DBName + "`"); err != nil {
			t.Errorf("storetest: drop database: %v", err)
		}
	})
	return cfg.FormatDSN()
}

// uniqueName builds "feedtest_<test>_<random>" within MySQL's 64 characters.
func uniqueName(test string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(test) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	name := b.String()
	if len(name) > 40 {
		name = name[len(name)-40:]
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	return "ft_" + name + "_" + hex.EncodeToString(rnd[:])
}

// Options shape the store a test gets.
type Options struct {
	// Shards is the number of databases the virtual shards are spread over
	// (0 means 1). They live on the same server, which is enough to run every
	// cross-shard path: each is its own pool and its own transactions.
	Shards int
	// MaxOpenConns sizes each class's pool of every shard; 0 means 8.
	MaxOpenConns int
	// Vars are server variables every connection sets (go-sql-driver sends
	// DSN parameters it does not know as SET name=value).
	Vars map[string]string
	// Trace, if set, sees every statement the store sends (store.WithTrace).
	Trace func(query string)
}

// NewStore returns a migrated store on fresh databases, closed when the test ends.
func NewStore(t testing.TB, opt Options) *store.Store {
	t.Helper()
	var opts []store.Option
	if opt.Trace != nil {
		opts = append(opts, store.WithTrace(opt.Trace))
	}
	st, err := store.Open(NewShardMap(t, opt), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(context.Background(), slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatalf("storetest: migrate: %v", err)
	}
	return st
}

// NewShardMap creates opt.Shards fresh databases and returns a map spreading
// the virtual shards evenly over them.
func NewShardMap(t testing.TB, opt Options) *shardmap.Map {
	t.Helper()
	n := max(opt.Shards, 1)
	conns := opt.MaxOpenConns
	if conns == 0 {
		conns = 8
	}
	m := &shardmap.Map{VirtualShards: shardmap.DefaultVirtualShards, Databases: map[string]shardmap.Database{}, InboxEngine: string(InboxEngine(t))}
	per := shardmap.DefaultVirtualShards / n
	for i := range n {
		name := fmt.Sprintf("db%d", i)
		cfg, err := mysql.ParseDSN(DatabaseDSN(t))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range opt.Vars {
			if cfg.Params == nil {
				cfg.Params = map[string]string{}
			}
			cfg.Params[k] = v
		}
		m.Databases[name] = shardmap.Database{DSN: cfg.FormatDSN(),
			Connections: shardmap.Connections{Read: conns, Write: conns, Workers: conns}}
		last := (i+1)*per - 1
		if i == n-1 {
			last = shardmap.DefaultVirtualShards - 1
		}
		m.Ranges = append(m.Ranges, shardmap.Range{VShards: fmt.Sprintf("%d-%d", i*per, last), Database: name})
	}
	return m
}
