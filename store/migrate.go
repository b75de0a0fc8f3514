package store

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/pressly/goose/v3"

	"github.com/feedhq/feed/migrations"
	"github.com/feedhq/feed/store/shardmap"
	"github.com/feedhq/feed/store/sqlconn"
)

// migrateLockName is the GET_LOCK name that serialises migrators of one
// database: two feedd processes starting together must not run the same DDL
// twice. GET_LOCK names are server-wide, so the name carries the database
// (hashed: MySQL caps names at 64 characters); a plain constant would make
// every database on a server, such as the shards sharing one, migrate one at a time.
const migrateLockName = "CONCAT('feed_migrate_', MD5(DATABASE()))"

// newProvider returns a goose provider without a goose locker: Migrate holds
// its own lock around the whole run instead. goose's Up calls HasPending,
// which ignores a SessionLocker and creates the version table and its zero
// row unlocked, so a second migrator (holding the goose lock) could see the
// table before that row and fail with "missing zero version migration".
func newProvider(db *sql.DB) (*goose.Provider, error) {
	return goose.NewProvider(goose.DialectMySQL, db, migrations.FS, goose.WithDisableGlobalRegistry(true))
}

// versionTableSQL tells whether goose's version table exists; without it
// every migration is pending.
const versionTableSQL = `SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'goose_db_version'`

// hasPendingMigrations reports whether the database lacks a migration. It
// checks for goose's version table first: goose would create it, and a
// readiness probe must not write, nor race a migrator's first step.
func hasPendingMigrations(ctx context.Context, db *sql.DB) (bool, error) {
	var n int
	if err := db.QueryRowContext(ctx, versionTableSQL).Scan(&n); err != nil || n == 0 {
		return true, err
	}
	p, err := newProvider(db)
	if err != nil {
		return false, err
	}
	return p.HasPending(ctx)
}

// Migrate creates each shard's database if it is missing, applies the
// embedded migrations to it and puts an empty inbox in the map's
// InboxEngine. It refuses a populated inbox in another engine: converting
// one copies every row, a step for MigrateConverting, not for a start.
func (s *Store) Migrate(ctx context.Context, log *slog.Logger) error {
	return s.migrate(ctx, log, nil)
}

// MigrateConverting is Migrate converting populated inboxes too, online,
// telling progress how the copy advances.
func (s *Store) MigrateConverting(ctx context.Context, log *slog.Logger, progress func(ConvertProgress)) error {
	if progress == nil {
		progress = func(ConvertProgress) {}
	}
	return s.migrate(ctx, log, progress)
}

// migrate converts populated inboxes when progress is set.
func (s *Store) migrate(ctx context.Context, log *slog.Logger, progress func(ConvertProgress)) error {
	for _, sh := range s.shards {
		if err := migrateShard(ctx, sh, s.engine, log, progress); err != nil {
			return err
		}
	}
	return nil
}

// MigrateDatabase does what Migrate does for one database named by a DSN:
// for tools that reach databases outside a Store, such as the new ones of
// a reshard.
func MigrateDatabase(ctx context.Context, name, dsn string, e Engine, log *slog.Logger) error {
	sh, err := openShard(name, shardmap.Database{DSN: dsn, Connections: shardmap.Connections{Read: 1, Write: 1, Workers: 2}}, sqlconn.Options{})
	if err != nil {
		return fmt.Errorf("store: database %q: %w", name, err)
	}
	defer func() {
		for _, db := range sh.pools {
			db.Close()
		}
		sh.conn.Close()
	}()
	return migrateShard(ctx, sh, e, log, nil)
}

func migrateShard(ctx context.Context, sh *Shard, e Engine, log *slog.Logger, progress func(ConvertProgress)) error {
	e, err := ParseEngine(string(e))
	if err != nil {
		return err
	}
	if err := createDatabase(ctx, sh.DB.DriverName(), sh.dsn); err != nil {
		return fmt.Errorf("store: migrate shard %s: %w", sh.Name, classify(err))
	}
	res, version, err := migrateLocked(ctx, sh, func() error { return convertInbox(ctx, sh, e, log, progress) })
	if err != nil {
		return fmt.Errorf("store: migrate shard %s: %w", sh.Name, classify(err))
	}
	log.Info("store: migrated", "shard", sh.Name, "applied", len(res), "version", version)
	return nil
}

// migrateLocked applies the migrations to the shard, then runs after, under
// the database's migrate lock. The lock lives on a connection of its own pool, so it never
// takes one of the connections goose needs, however small the shard's pool.
func migrateLocked(ctx context.Context, sh *Shard, after func() error) (res []*goose.MigrationResult, version int64, err error) {
	lockDB, err := sql.Open(sh.DB.DriverName(), sh.dsn)
	if err != nil {
		return nil, 0, err
	}
	defer lockDB.Close()
	conn, err := lockDB.Conn(ctx)
	if err != nil {
		return nil, 0, err
	}
	defer conn.Close()
	if err := getMigrateLock(ctx, conn); err != nil {
		return nil, 0, err
	}
	// Closing the connection would release the lock too; release it
	// explicitly even if ctx is done.
	defer conn.ExecContext(context.WithoutCancel(ctx), `SELECT RELEASE_LOCK(`+migrateLockName+`)`)

	p, err := newProvider(sh.DB.DB)
	if err != nil {
		return nil, 0, err
	}
	if res, err = p.Up(ctx); err != nil {
		return nil, 0, err
	}
	if version, err = p.GetDBVersion(ctx); err != nil {
		return nil, 0, err
	}
	return res, version, after()
}

// getMigrateLock waits up to five minutes for the migrate lock on conn. TiDB
// takes GET_LOCK as a pessimistic lock on a row of its own, and a waiter
// that loses to other migrators too often gets "pessimistic lock retry limit
// reached" instead of waiting on: it asks again until the five minutes are up.
func getMigrateLock(ctx context.Context, conn *sql.Conn) error {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		var got sql.NullInt64
		err := conn.QueryRowContext(ctx, `SELECT GET_LOCK(`+migrateLockName+`, ?)`, max(1, int(time.Until(deadline).Seconds()))).Scan(&got)
		switch {
		case err == nil && got.Int64 == 1:
			return nil
		case err == nil:
			return fmt.Errorf("get_lock %s: timed out", migrateLockName)
		case !Retryable(err) || time.Now().After(deadline):
			return fmt.Errorf("get_lock: %w", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// createDatabase connects without a database name and creates the DSN's
// database, so a fresh server needs no manual step.
func createDatabase(ctx context.Context, driverName, dsn string) error {
	c, err := mysql.ParseDSN(dsn)
	if err != nil {
		return err
	}
	name := c.DBName
	c.DBName = ""
	db, err := sql.Open(driverName, c.FormatDSN())
	if err != nil {
		return err
	}
	defer db.Close()
	// A schema name cannot be a placeholder; quoteIdent escapes it.
	_, err = db.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS "+quoteIdent(name))
	return err
}

// quoteIdent backquotes a MySQL identifier.
func quoteIdent(name string) string {
	out := []byte{'`'}
	for i := 0; i < len(name); i++ {
		if name[i] == '`' {
			out = append(out, '`')
		}
		out = append(out, name[i])
	}
	return string(append(out, '`'))
}
