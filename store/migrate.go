package store

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"

	"github.com/go-sql-driver/mysql"
	"github.com/pressly/goose/v3"

	"github.com/feedhq/feed/migrations"
)

// migrateLockName is the GET_LOCK name that serialises migrators of one
// database: goose's own lockers do not use GET_LOCK, and two feedd processes
// starting together must not run the same DDL twice.
const migrateLockName = "feed_migrate"

// getLockLocker is a goose SessionLocker on MySQL's GET_LOCK.
type getLockLocker struct{}

func (getLockLocker) SessionLock(ctx context.Context, conn *sql.Conn) error {
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, `SELECT GET_LOCK(?, 300)`, migrateLockName).Scan(&got); err != nil {
		return fmt.Errorf("get_lock: %w", err)
	}
	if got.Int64 != 1 {
		return fmt.Errorf("get_lock %s: timed out", migrateLockName)
	}
	return nil
}

func (getLockLocker) SessionUnlock(ctx context.Context, conn *sql.Conn) error {
	_, err := conn.ExecContext(ctx, `SELECT RELEASE_LOCK(?)`, migrateLockName)
	return err
}

func newProvider(db *sql.DB) (*goose.Provider, error) {
	return goose.NewProvider(goose.DialectMySQL, db, migrations.FS,
		goose.WithSessionLocker(getLockLocker{}), goose.WithDisableGlobalRegistry(true))
}

func hasPendingMigrations(ctx context.Context, db *sql.DB) (bool, error) {
	p, err := newProvider(db)
	if err != nil {
		return false, err
	}
	return p.HasPending(ctx)
}

// Migrate creates each shard's database if it is missing and applies the
// embedded migrations to it.
func (s *Store) Migrate(ctx context.Context, log *slog.Logger) error {
	for _, sh := range s.shards {
		if err := createDatabase(ctx, sh.DB.DriverName(), sh.dsn); err != nil {
			return fmt.Errorf("store: migrate shard %s: %w", sh.Name, classify(err))
		}
		p, err := newProvider(sh.DB.DB)
		if err != nil {
			return fmt.Errorf("store: migrate shard %s: %w", sh.Name, err)
		}
		res, err := p.Up(ctx)
		if err != nil {
			return fmt.Errorf("store: migrate shard %s: %w", sh.Name, classify(err))
		}
		version, err := p.GetDBVersion(ctx)
		if err != nil {
			return fmt.Errorf("store: migrate shard %s: %w", sh.Name, classify(err))
		}
		log.Info("store: migrated", "shard", sh.Name, "applied", len(res), "version", version)
	}
	return nil
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
