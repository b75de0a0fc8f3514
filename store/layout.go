package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/feedhq/feed/store/shardmap"
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
func (s *Store) Layout() string { return shardmap.FormatLayout(s.Owners()) }

// Owners returns the name of the database that owns each virtual shard in
// the layout the store routes by, indexed by virtual shard.
func (s *Store) Owners() []string {
	owner := s.route().owner
	names := make([]string, len(owner))
	for v, sh := range owner {
		names[v] = sh.Name
	}
	return names
}

// CheckLayout compares the store's layout with the one in force on its
// databases (the highest epoch any of them records) and routes by its
// epoch. Databases that record none adopt the store's at epoch 1 on a first
// start; a database that lacks the epoch in force (one added empty, or one
// whose record a crash cut short) gets it. A layout that differs is an
// error naming each run of virtual shards it would move.
func (s *Store) CheckLayout(ctx context.Context) error {
	mine := s.Layout()
	epoch, inForce, err := s.layoutInForce(ctx)
	if err != nil {
		return err
	}
	if epoch != 0 && inForce != mine {
		return layoutMismatch(epoch, inForce, mine)
	}
	if err := s.checkIdentities(ctx, epoch); err != nil {
		return err
	}
	if epoch == 0 {
		epoch = 1
	}
	for _, sh := range s.shards {
		err := RecordLayout(ctx, sh.DB, epoch, mine)
		if mysqlErrno(err) == errNoSuchTable {
			continue // migrating records it
		}
		if err != nil {
			return fmt.Errorf("store: database %s: record the layout: %w", sh.Name, classify(err))
		}
	}
	// Two processes adopting different files at once: the first insert
	// wins everywhere it landed; read the outcome back.
	e, got, err := s.layoutInForce(ctx)
	if err != nil {
		return err
	} else if e != 0 && got != mine { // 0: not migrated, so nothing recorded
		return layoutMismatch(e, got, mine)
	}
	names, err := shardmap.ParseLayout(mine)
	if err != nil {
		return err
	}
	return s.setRoute(max(e, epoch), names)
}

const (
	identitySQL       = `SELECT name FROM identity WHERE id = 0`
	recordIdentitySQL = `INSERT IGNORE INTO identity (id, name) VALUES (0, ?)`
)

// ReadIdentity returns the name a database records for itself ("" when it
// records none, or is not migrated yet).
func ReadIdentity(ctx context.Context, db sqlx.QueryerContext) (string, error) {
	var name string
	err := sqlx.GetContext(ctx, db, &name, identitySQL)
	if errors.Is(err, sql.ErrNoRows) || mysqlErrno(err) == errNoSuchTable {
		return "", nil
	}
	return name, err
}

// RecordIdentity records a database's name in the shard map, once.
func RecordIdentity(ctx context.Context, db sqlx.ExecerContext, name string) error {
	_, err := db.ExecContext(ctx, recordIdentitySQL, name)
	if mysqlErrno(err) == errNoSuchTable {
		return nil // migrating records it
	}
	return err
}

// checkIdentities refuses DSNs that reach the wrong databases: one that
// records another name, or, once the deployment has a layout (epoch > 0),
// one that owns virtual shards but records no name and no layout (a new or
// empty database, which holds none of the rows its virtual shards need).
// A database that owns none is one a reshard may move data to. Then it
// records each database's name.
func (s *Store) checkIdentities(ctx context.Context, epoch int64) error {
	for _, sh := range s.shards {
		name, err := ReadIdentity(ctx, sh.DB)
		if err != nil {
			return fmt.Errorf("store: database %s: read its identity: %w", sh.Name, classify(err))
		}
		if name != "" && name != sh.Name {
			return fmt.Errorf("sharding: the dsn of database %s reaches the database named %s: "+
				"the file's DSNs and names must match the databases they name", sh.Name, name)
		}
		if name == "" && epoch > 0 && s.owns(sh) {
			if e, _, err := ReadLayout(ctx, sh.DB); err != nil {
				return fmt.Errorf("store: database %s: %w", sh.Name, err)
			} else if e == 0 {
				return fmt.Errorf("sharding: database %s holds none of this deployment's data (a new or empty database): "+
					"point its dsn at the database that holds its rows, or move virtual shards to it with feedd reshard", sh.Name)
			}
		}
	}
	for _, sh := range s.shards {
		if err := RecordIdentity(ctx, sh.DB, sh.Name); err != nil {
			return fmt.Errorf("store: database %s: record its identity: %w", sh.Name, classify(err))
		}
	}
	return nil
}

// owns says whether the store's layout places a virtual shard on sh.
func (s *Store) owns(sh *Shard) bool {
	return slices.Contains(s.route().owner, sh)
}

// layoutInForce reads the highest epoch recorded on any database (0 when
// none records one).
func (s *Store) layoutInForce(ctx context.Context) (int64, string, error) {
	var epoch int64
	var layout string
	for _, sh := range s.shards {
		e, l, err := ReadLayout(ctx, sh.DB)
		if err != nil {
			return 0, "", fmt.Errorf("store: database %s: %w", sh.Name, err)
		}
		if e > epoch {
			epoch, layout = e, l
		}
	}
	return epoch, layout, nil
}

// ReadLayout returns the highest epoch a database records and its layout
// (0 and "" when it records none, or is not migrated yet).
func ReadLayout(ctx context.Context, db sqlx.QueryerContext) (int64, string, error) {
	var row struct {
		Epoch  int64  `db:"epoch"`
		Layout string `db:"layout"`
	}
	err := sqlx.GetContext(ctx, db, &row, layoutInForceSQL)
	if errors.Is(err, sql.ErrNoRows) || mysqlErrno(err) == errNoSuchTable {
		return 0, "", nil
	}
	if err != nil {
		return 0, "", fmt.Errorf("read the layout in force: %w", classify(err))
	}
	return row.Epoch, row.Layout, nil
}

// RecordLayout records a layout at an epoch on a database; recording it
// again changes nothing.
func RecordLayout(ctx context.Context, db sqlx.ExecerContext, epoch int64, layout string) error {
	_, err := db.ExecContext(ctx, recordLayoutSQL, epoch, layout, time.Now().UnixMilli())
	return err
}

const reshardUnderWaySQL = `SELECT layout FROM reshard WHERE id = 0`

// ReshardUnderWay returns the layout a reshard under way on the database
// moves to, or "" when there is none.
func ReshardUnderWay(ctx context.Context, db sqlx.QueryerContext) (string, error) {
	var layout string
	err := sqlx.GetContext(ctx, db, &layout, reshardUnderWaySQL)
	if errors.Is(err, sql.ErrNoRows) || mysqlErrno(err) == errNoSuchTable {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read the reshard under way: %w", classify(err))
	}
	return layout, nil
}

// layoutMismatch names the runs of virtual shards that want differs on.
func layoutMismatch(epoch int64, inForce, want string) error {
	have, err := shardmap.ParseLayout(inForce)
	if err != nil {
		return fmt.Errorf("store: the layout in force (epoch %d) is unreadable: %w", epoch, err)
	}
	wantNames, err := shardmap.ParseLayout(want)
	if err != nil {
		return fmt.Errorf("store: the layout asked for is unreadable: %w", err)
	}
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
		"rows do not move by editing the file: run feedd reshard plan and feedd reshard apply with this file to move them, "+
		"or start with the file of the layout in force (docs/SHARDING.md)",
		epoch, strings.Join(diffs, "; "))
}

// MapFor returns the shard map that places virtual shards as layout says,
// on the store's databases.
func (s *Store) MapFor(layout string) (*shardmap.Map, error) {
	dsns := map[string]string{}
	for _, sh := range s.shards {
		dsns[sh.Name] = sh.dsn
	}
	m, err := shardmap.FromLayout(layout, dsns)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	return m, nil
}

// Ranges returns the runs of virtual shards the layout in force gives sh,
// as "first-last".
func (s *Store) Ranges(sh *Shard) []string {
	var out []string
	for _, f := range strings.Fields(s.Layout())[1:] {
		if r, name, _ := strings.Cut(f, "="); name == sh.Name {
			out = append(out, r)
		}
	}
	return out
}
