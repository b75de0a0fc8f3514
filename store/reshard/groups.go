package reshard

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/feedhq/feed/store"
)

// A table whose placing id leads an index (table.byID) is read by id: the
// ids it holds are listed with their rows counted, in order, and the rows
// of the ids a step wants are read, copied or deleted a group at a time,
// so a step reads the moving virtual shards' rows and not the others'.

// group is ids of one table, ascending, whose rows one statement reads,
// copies or deletes: ids of few rows together, up to a batch of rows, or
// one id with more rows than a batch, which goes a batch at a time in
// t.order (big).
type group struct {
	ids   []uint64
	rows  int64 // as counted when listed
	batch int   // rows a statement
}

func (g group) big() bool { return len(g.ids) == 1 && g.rows > int64(g.batch) }

// InServerBatches is how many batches of rows one statement of a copy
// within the server takes: its rows never leave the server, so a
// statement's cost is mostly its commit, which larger ones share.
const InServerBatches = 20

// eachRow calls fn with each row of t on db whose placing id class puts in
// a class ("" leaves it out), with that class, in t.order by group where t
// has its byID index, else in primary key order by reading every row.
// onGroup, if set, may take a whole group instead (returning true): its
// rows are then not read. batch, if set, gives the rows of a class's
// statements (else Options.BatchSize). pr counts the rows read or listed
// and those of the classes, and is reported as the step goes, from the
// table's start.
func (r *Reshard) eachRow(ctx context.Context, db *sqlx.DB, t table, pr *Progress, class func(id uint64) string, batch func(c string) int,
	onGroup func(c string, g group) (bool, error), fn func(c string, id uint64, row []any) error) error {
	r.report(*pr) // the table's start
	defer func() { r.report(*pr) }()
	if t.byID == "" {
		return r.scan(ctx, db, t, func(id uint64, row []any) error {
			pr.Rows++
			if c := class(id); c != "" {
				pr.Moved++
				if err := fn(c, id, row); err != nil {
					return err
				}
			}
			if pr.Rows%int64(r.opt.BatchSize) == 0 {
				r.report(*pr)
			}
			return nil
		})
	}
	return r.eachGroup(ctx, db, t, pr, class, batch, func(c string, g group) error {
		if onGroup != nil {
			if done, err := onGroup(c, g); done || err != nil {
				return err
			}
		}
		return r.groupRows(ctx, db, t, g, func(row []any) error {
			id, err := placingID(row[t.key])
			if err != nil {
				return fmt.Errorf("table %s: %w", t.name, err)
			}
			return fn(c, id, row)
		})
	})
}

// eachGroup lists the ids of t on db in order, with their rows counted
// through t.byID (the server reads the index, not the rows), and calls fn
// with the groups of those class puts in a class, a class at a time.
func (r *Reshard) eachGroup(ctx context.Context, db *sqlx.DB, t table, pr *Progress, class func(id uint64) string, batch func(c string) int, fn func(c string, g group) error) error {
	open := map[string]*group{}
	flush := func(c string) error {
		g := open[c]
		delete(open, c)
		if err := fn(c, *g); err != nil {
			return err
		}
		r.report(*pr)
		return r.pause(ctx)
	}
	k := "`" + t.cols[t.key] + "`"
	list := "SELECT " + k + " AS id, COUNT(*) AS n" + t.fromByID() + " WHERE " + k + " %s ? GROUP BY " + k + " ORDER BY " + k + " LIMIT ?"
	type counted struct {
		ID   uint64 `db:"id"`
		Rows int64  `db:"n"`
	}
	var last uint64
	op := ">="
	for {
		var ids []counted
		if err := db.SelectContext(ctx, &ids, fmt.Sprintf(list, op), last, r.opt.BatchSize); err != nil {
			return err
		}
		for _, x := range ids {
			pr.Rows += x.Rows
			c := class(x.ID)
			if c == "" {
				continue
			}
			pr.Moved += x.Rows
			if g := open[c]; g != nil && g.rows+x.Rows > int64(g.batch) {
				if err := flush(c); err != nil {
					return err
				}
			}
			g := open[c]
			if g == nil {
				g = &group{batch: r.opt.BatchSize}
				if batch != nil {
					g.batch = batch(c)
				}
				open[c] = g
			}
			g.ids = append(g.ids, x.ID)
			g.rows += x.Rows
		}
		if len(ids) < r.opt.BatchSize {
			break
		}
		last, op = ids[len(ids)-1].ID, ">"
		r.report(*pr)
	}
	for _, c := range slices.Sorted(maps.Keys(open)) {
		if err := flush(c); err != nil {
			return err
		}
	}
	return nil
}

// groupRows reads the rows of g's ids on db in t.order and calls fn with
// each: in one statement, or a batch at a time for a big group.
func (r *Reshard) groupRows(ctx context.Context, db *sqlx.DB, t table, g group, fn func(row []any) error) error {
	sel := "SELECT " + quoted(t.cols) + t.fromByID() + " WHERE "
	if !g.big() {
		where, args := t.idsIn(g.ids)
		_, err := scanBatch(ctx, db, sel+where+" ORDER BY "+t.orderBy(), args, len(t.cols), fn)
		return err
	}
	var last []any
	for {
		where, args := t.oneID(g.ids[0], last)
		n, err := scanBatch(ctx, db, sel+where+" ORDER BY "+t.orderBy()+" LIMIT ?", append(args, g.batch), len(t.cols), func(row []any) error {
			last = row
			return fn(row)
		})
		if err != nil || n < g.batch {
			return err
		}
		if err := r.pause(ctx); err != nil {
			return err
		}
	}
}

// copyGroup copies the rows of g's ids, but claimable ones, from the
// source conn is on into schema on the same server, without the rows
// leaving the server: INSERT IGNORE … SELECT, a batch of rows a statement
// for a big group, whose bounds it reads first.
func (r *Reshard) copyGroup(ctx context.Context, conn *sqlx.Conn, t table, schema string, g group) error {
	cols := quoted(t.cols)
	head := "INSERT IGNORE INTO `" + strings.ReplaceAll(schema, "`", "``") + "`.`" + t.name + "` (" + cols + ") SELECT " + cols +
		t.fromByID() + " WHERE "
	var notClaimable string
	if c, ok := store.Claimable[t.name]; ok {
		notClaimable = " AND NOT (" + c.SQL + ")"
	}
	insert := func(where string, args []any) error {
		return retryLocked(ctx, func() error {
			_, err := conn.ExecContext(ctx, head+where+notClaimable, args...)
			return err
		})
	}
	if !g.big() {
		where, args := t.idsIn(g.ids)
		return insert(where, args)
	}
	var last []any
	for {
		where, args := t.oneID(g.ids[0], last)
		// The batch's last row, where the next one starts.
		var bound []any
		_, err := scanBatch(ctx, conn, "SELECT "+t.orderBy()+t.fromByID()+" WHERE "+
			where+" ORDER BY "+t.orderBy()+" LIMIT 1 OFFSET ?", append(slices.Clone(args), g.batch-1), len(t.order), func(row []any) error {
			bound = make([]any, len(t.cols))
			for i, c := range t.order {
				bound[c] = row[i]
			}
			return nil
		})
		if err != nil {
			return err
		}
		if bound == nil { // the rest is less than a batch
			return insert(where, args)
		}
		upTo, uargs := t.keyset(t.order, bound, "<", "<=")
		if err := insert(where+" AND ("+upTo+")", append(args, uargs...)); err != nil {
			return err
		}
		last = bound
		if err := r.pause(ctx); err != nil {
			return err
		}
	}
}

// deleteGroup deletes the rows of g's ids from db: in one statement, or a
// batch at a time for a big group. Workers may hold the rows (a push
// through a stale follow edge): a deadlock runs the statement again.
func (r *Reshard) deleteGroup(ctx context.Context, db *sqlx.DB, t table, g group) error {
	if !g.big() {
		where, args := t.idsIn(g.ids)
		return retryLocked(ctx, func() error {
			_, err := db.ExecContext(ctx, "DELETE FROM `"+t.name+"` WHERE "+where, args...)
			return err
		})
	}
	for {
		var n int64
		err := retryLocked(ctx, func() error {
			res, err := db.ExecContext(ctx, "DELETE FROM `"+t.name+"` WHERE `"+t.cols[t.key]+"` = ? LIMIT ?", g.ids[0], g.batch)
			if err != nil {
				return err
			}
			n, err = res.RowsAffected()
			return err
		})
		if err != nil || n < int64(g.batch) {
			return err
		}
		if err := r.pause(ctx); err != nil {
			return err
		}
	}
}

// idsIn is the predicate "placing id in ids" and its arguments.
func (t table) idsIn(ids []uint64) (string, []any) {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	return "`" + t.cols[t.key] + "` IN (?" + strings.Repeat(",?", len(ids)-1) + ")", args
}

// oneID is the predicate "the rows of id after last in t.order" (all of
// them for a nil last) and its arguments.
func (t table) oneID(id uint64, last []any) (string, []any) {
	where, args := "`"+t.cols[t.key]+"` = ?", []any{id}
	if last != nil {
		after, a := t.keyset(t.order, last, ">", ">")
		where += " AND (" + after + ")"
		args = append(args, a...)
	}
	return where, args
}

// fromByID is the FROM clause reading t through its byID index.
func (t table) fromByID() string { return " FROM `" + t.name + "` FORCE INDEX (`" + t.byID + "`)" }

// orderBy is t.order as a list of columns, for ORDER BY or SELECT.
func (t table) orderBy() string {
	cols := make([]string, len(t.order))
	for i, c := range t.order {
		cols[i] = "`" + t.cols[c] + "`"
	}
	return strings.Join(cols, ", ")
}

// pause waits Options.Throttle after a batch.
func (r *Reshard) pause(ctx context.Context) error {
	if r.opt.Throttle <= 0 {
		return nil
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(r.opt.Throttle):
		return nil
	}
}

// inServer returns, when database to lives on the same server as database
// from, its schema there and a connection to from that copies into it
// (copyGroup): one whose reads of the source take no shared locks on its
// rows (READ COMMITTED), so the service's writes to them do not wait. The
// server is the same when a lock taken on to is seen taken from from, and
// the schema is to's when from reads to's identity there; otherwise (or
// without the privileges to read and write it from from) the connection
// is nil and the rows go through the client.
func (r *Reshard) inServer(ctx context.Context, from, to string) (*sqlx.Conn, string, error) {
	probe, err := r.dbs[to].Connx(ctx)
	if err != nil {
		return nil, "", err
	}
	defer probe.Close()
	var schema string
	var id int64
	if err := probe.QueryRowContext(ctx, "SELECT DATABASE(), CONNECTION_ID()").Scan(&schema, &id); err != nil {
		return nil, "", err
	}
	name := fmt.Sprintf("feed_reshard_%016x", rand.Uint64())
	var got sql.NullInt64
	if err := probe.QueryRowContext(ctx, "SELECT GET_LOCK(?, 0)", name).Scan(&got); err != nil || got.Int64 != 1 {
		return nil, "", err
	}
	defer probe.ExecContext(context.WithoutCancel(ctx), "DO RELEASE_LOCK(?)", name) //nolint:errcheck // the connection's end releases it too
	var holder sql.NullInt64
	if err := r.dbs[from].QueryRowContext(ctx, "SELECT IS_USED_LOCK(?)", name).Scan(&holder); err != nil {
		return nil, "", err
	}
	if !holder.Valid || holder.Int64 != id {
		return nil, "", nil
	}
	// From the source, the schema must be to's, and writable: an INSERT
	// of no rows checks the privilege without writing.
	there := "`" + strings.ReplaceAll(schema, "`", "``") + "`.identity"
	var ident string
	err = r.dbs[from].GetContext(ctx, &ident, "SELECT name FROM "+there+" WHERE id = 0")
	if err == nil && ident == to {
		_, err = r.dbs[from].ExecContext(ctx, "INSERT IGNORE INTO "+there+" (id, name) SELECT id, name FROM "+there+" WHERE 1 = 0")
	}
	if err != nil || ident != to {
		return nil, "", nil //nolint:nilerr // not reachable from there: the rows go through the client
	}
	conn, err := r.dbs[from].Connx(ctx)
	if err != nil {
		return nil, "", err
	}
	if _, err := conn.ExecContext(ctx, "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"); err != nil {
		conn.Close()
		return nil, "", err
	}
	return conn, schema, nil
}
