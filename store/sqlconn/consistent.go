package sqlconn

import (
	"context"
	"database/sql/driver"

	"github.com/jmoiron/sqlx"
)

// ConsistentRead is a read-only transaction on one connection, started
// WITH CONSISTENT SNAPSHOT: MariaDB takes it in every engine at once,
// between commits, so a transaction that wrote RocksDB and InnoDB tables
// shows in both or in neither. (A statement reads each engine as of its own
// first read, and a transaction lets each engine's writes show as that
// engine commits.) A reshard's catch-up reads through one.
type ConsistentRead struct{ *sqlx.Conn }

// OpenConsistentRead starts a ConsistentRead on a connection of db.
func OpenConsistentRead(ctx context.Context, db *sqlx.DB) (*ConsistentRead, error) {
	conn, err := db.Connx(ctx)
	if err != nil {
		return nil, err
	}
	// The level of the next transaction only: InnoDB takes no snapshot
	// at its start under READ COMMITTED.
	for _, q := range []string{"SET TRANSACTION ISOLATION LEVEL REPEATABLE READ", "START TRANSACTION WITH CONSISTENT SNAPSHOT"} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			conn.Close()
			return nil, err
		}
	}
	return &ConsistentRead{conn}, nil
}

// Close ends the transaction and gives the connection back, or drops it if
// the transaction could not be ended.
func (r *ConsistentRead) Close(ctx context.Context) {
	if _, err := r.ExecContext(context.WithoutCancel(ctx), "ROLLBACK"); err != nil {
		_ = r.Raw(func(any) error { return driver.ErrBadConn })
	}
	r.Conn.Close()
}
