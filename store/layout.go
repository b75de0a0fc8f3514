package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"
)

// The layout, which database owns each virtual shard, is recorded on every
// database with an epoch. sharding.yaml only names it: a file whose layout
// differs from the one in force would route reads and writes to databases
// that do not hold the rows, which is silent data loss, so feedd refuses to
// start with it.

const layoutInForceSQL = `SELECT epoch, layout FROM shard_map ORDER BY epoch DESC LIMIT 1`

const recordLayoutSQL = `INSERT IGNORE INTO shard_map (epoch, layout, adopted_at) VALUES (?, ?, ?)`

// Layout is the canonical text of the store's layout: the virtual shard
// count, then each run of virtual shards with its database, e.g.
// "1024 0-511=a 512-1023=b".
func (s *Store) Layout() string {
	names := make([]string, len(s.owner))
	for v, sh := range s.owner {
		names[v] = sh.Name
	}
	return formatLayout(names)
}

func formatLayout(names []string) string {
	var b strings.Builder
	b.WriteString(strconv.Itoa(len(names)))
	for first := 0; first < len(names); {
		last := first
		for last+1 < len(names) && names[last+1] == names[first] {
			last++
		}
		fmt.Fprintf(&b, " %d-%d=%s", first, last, names[first])
		first = last + 1
	}
	return b.String()
}

// parseLayout is the inverse of formatLayout: the database of every
// virtual shard.
func parseLayout(layout string) ([]string, error) {
	fields := strings.Fields(layout)
	if len(fields) == 0 {
		return nil, fmt.Errorf("empty layout")
	}
	n, err := strconv.Atoi(fields[0])
	if err != nil || n < 1 || n > 1<<16 {
		return nil, fmt.Errorf("bad layout %q", layout)
	}
	names := make([]string, n)
	for _, f := range fields[1:] {
		r, name, ok := strings.Cut(f, "=")
		first, last, err := parseRange(r)
		if !ok || err != nil || last >= n {
			return nil, fmt.Errorf("bad layout %q", layout)
		}
		for v := first; v <= last; v++ {
			names[v] = name
		}
	}
	return names, nil
}

// CheckLayout compares the store's layout with the one in force on its
// databases (the highest epoch any of them records). Databases that record
// none adopt the store's at epoch 1 on a first start; a database that lacks
// the epoch in force (one added empty, or one whose record a crash cut short)
// gets it. A layout that differs is an error naming each run of virtual
// shards it would move.
func (s *Store) CheckLayout(ctx context.Context) error {
	mine := s.Layout()
	epoch, inForce, err := s.layoutInForce(ctx)
	if err != nil {
		return err
	}
	if epoch == 0 {
		epoch, inForce = 1, mine
	}
	if inForce != mine {
		return layoutMismatch(epoch, inForce, mine)
	}
	now := time.Now().UnixMilli()
	for _, sh := range s.shards {
		_, err := sh.DB.ExecContext(ctx, recordLayoutSQL, epoch, mine, now)
		if mysqlErrno(err) == errNoSuchTable {
			continue // migrating records it
		}
		if err != nil {
			return fmt.Errorf("store: database %s: record the layout: %w", sh.Name, classify(err))
		}
	}
	// Two processes adopting different files at once: the first insert
	// wins everywhere it landed; read the outcome back.
	if e, got, err := s.layoutInForce(ctx); err != nil {
		return err
	} else if e != 0 && got != mine { // 0: not migrated, so nothing recorded
		return layoutMismatch(e, got, mine)
	}
	return nil
}

// layoutInForce reads the highest epoch recorded on any database (0 when
// none records one).
func (s *Store) layoutInForce(ctx context.Context) (int64, string, error) {
	var epoch int64
	var layout string
	for _, sh := range s.shards {
		var row struct {
			Epoch  int64  `db:"epoch"`
			Layout string `db:"layout"`
		}
		err := sqlx.GetContext(ctx, sh.DB, &row, layoutInForceSQL)
		if errors.Is(err, sql.ErrNoRows) || mysqlErrno(err) == errNoSuchTable {
			continue // records none, or not migrated yet
		}
		if err != nil {
			return 0, "", fmt.Errorf("store: database %s: read the layout in force: %w", sh.Name, classify(err))
		}
		if row.Epoch > epoch {
			epoch, layout = row.Epoch, row.Layout
		}
	}
	return epoch, layout, nil
}

// layoutMismatch names the runs of virtual shards that want differs on.
func layoutMismatch(epoch int64, inForce, want string) error {
	have, err := parseLayout(inForce)
	if err != nil {
		return fmt.Errorf("store: the layout in force (epoch %d) is unreadable: %w", epoch, err)
	}
	wantNames, _ := parseLayout(want)
	if len(have) != len(wantNames) {
		return fmt.Errorf("sharding: virtual_shards is %d, the data is laid out in %d (epoch %d); it cannot change",
			len(wantNames), len(have), epoch)
	}
	var diffs []string
	for first := 0; first < len(have); {
		if have[first] == wantNames[first] {
			first++
			continue
		}
		last := first
		for last+1 < len(have) && have[last+1] == have[first] && wantNames[last+1] == wantNames[first] {
			last++
		}
		diffs = append(diffs, fmt.Sprintf("vshards %d-%d are on %s, the file puts them on %s", first, last, have[first], wantNames[first]))
		first = last + 1
	}
	return fmt.Errorf("sharding: the file's layout differs from the one in force (epoch %d): %s; "+
		"rows do not move by editing the file: put the ranges back, or move whole databases by changing only their dsn (docs/SHARDING.md)",
		epoch, strings.Join(diffs, "; "))
}
