package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/store/sqlconn"
)

// Engine is the storage engine of the inbox table. Every other table stays
// in InnoDB: the inbox is most of the bytes and most of the reads.
type Engine string

const (
	// InnoDB is every MySQL-family server's engine, the default.
	InnoDB Engine = "innodb"
	// RocksDB is MyRocks (MariaDB's and Percona Server's plugin): about a
	// sixth of InnoDB's bytes per entry, and when the inboxes do not fit
	// in memory, fan-out several times as fast and fewer disk reads a page.
	RocksDB Engine = "rocksdb"
)

// ParseEngine reads an inbox engine setting; empty means InnoDB.
func ParseEngine(s string) (Engine, error) {
	switch e := Engine(strings.ToLower(s)); e {
	case "", InnoDB:
		return InnoDB, nil
	case RocksDB:
		return e, nil
	}
	return "", fmt.Errorf("inbox engine must be innodb or rocksdb, got %q", s)
}

// sqlName is the engine's name as information_schema spells it.
func (e Engine) sqlName() string {
	if e == RocksDB {
		return "ROCKSDB"
	}
	return "InnoDB"
}

// InboxFamily is the RocksDB column family of the inbox: its options (a
// bloom filter per user, compression, index blocks out of the block cache)
// are what make MyRocks fast here, and a family of its own keeps them off
// anything else the server stores in RocksDB. deploy/rocksdb.cnf sets them.
const InboxFamily = "feed_inbox"

// inboxKey is the inbox's primary key, which a conversion redefines to
// name (or drop) the column family (Engine.alterSQL).
const inboxKey = "PRIMARY KEY (user_id, publish_time, content_id)"

// familyOption is one column family option the inbox needs: where
// information_schema.ROCKSDB_CF_OPTIONS shows it, the value it must have
// there, and how the option file spells it.
type familyOption struct {
	name, want, setting string
}

var familyOptions = []familyOption{
	{"PREFIX_EXTRACTOR", "rocksdb.CappedPrefix.12", "prefix_extractor=capped:12"},
	{"TABLE_FACTORY::FILTER_POLICY", "rocksdb.BuiltinBloomFilter", "filter_policy=bloomfilter:10:false"},
	{"TABLE_FACTORY::CACHE_INDEX_AND_FILTER_BLOCKS", "0", "cache_index_and_filter_blocks=0"},
	{"COMPRESSION_TYPE", "kZSTD", "compression=kZSTD"},
	{"BOTTOMMOST_COMPRESSION", "kZSTD", "bottommost_compression=kZSTD"},
}

// innodbFirstSQL reads an InnoDB table and nothing else.
const innodbFirstSQL = `SELECT COUNT(*) FROM following WHERE user_id = 0 AND author_id = 0`

// openWithInnoDB runs a read of an InnoDB table as tx's first statement.
// MariaDB commits a transaction's engines in the reverse order of their
// first use, each letting go of its locks and showing its writes as it
// commits; with the inbox in RocksDB this makes tx's inbox rows show before
// its InnoDB writes and locks, for those that wait on the InnoDB rows and
// then read the inbox (docs/DESIGN.md, "Isolation"). It runs whatever the
// configured engine: an online conversion moves the inbox to RocksDB under
// processes still running with the old setting.
func openWithInnoDB(ctx context.Context, tx *sqlx.Tx) error {
	var zero int
	return tx.GetContext(ctx, &zero, innodbFirstSQL)
}

// engineAdvice ends every refusal of the rocksdb engine.
const engineAdvice = "start the server with the options in deploy/rocksdb.cnf (MariaDB: package mariadb-plugin-rocksdb; Oracle MySQL has no MyRocks), or set FEED_INBOX_ENGINE=innodb"

// CheckEngine refuses the map's InboxEngine where a database cannot serve
// it well: for rocksdb, a server without MyRocks, or whose inbox column
// family lacks an option of deploy/rocksdb.cnf. It also refuses a database
// whose inbox is in another engine: feedd migrate converts it.
func (s *Store) CheckEngine(ctx context.Context) error {
	e := s.engine
	for _, sh := range s.shards {
		if err := checkEngine(ctx, sh.DB, e); err != nil {
			return fmt.Errorf("store: database %s: %w", sh.Name, err)
		}
		cur, err := inboxEngine(ctx, sh.DB)
		if errors.Is(err, sql.ErrNoRows) {
			continue // not migrated: migrating makes the inbox in e
		}
		if err != nil {
			return fmt.Errorf("store: database %s: %w", sh.Name, classify(err))
		}
		if cur != e {
			return fmt.Errorf("store: database %s: %w", sh.Name, mismatch(cur, e))
		}
	}
	return nil
}

// checkEngine checks that the server has engine e and, for rocksdb, that
// its binary log is on (MyRocks's two-phase commit with InnoDB needs it)
// and that the inbox's column family has the options it needs: the
// family's own options once it exists, else the server's settings it will
// be made with.
func checkEngine(ctx context.Context, db *sqlx.DB, e Engine) error {
	if e != RocksDB {
		return nil
	}
	var support string
	err := db.QueryRowContext(ctx, `SELECT SUPPORT FROM information_schema.ENGINES WHERE ENGINE = 'ROCKSDB'`).Scan(&support)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && support != "YES" && support != "DEFAULT") {
		return feed.Errorf(feed.EINVALID, "FEED_INBOX_ENGINE=rocksdb: the server has no ROCKSDB engine: %s", engineAdvice)
	}
	if err != nil {
		return classify(err)
	}
	var logBin int
	var format string
	if err := db.QueryRowContext(ctx, `SELECT @@log_bin, @@binlog_format`).Scan(&logBin, &format); err != nil {
		return classify(err)
	}
	if logBin != 1 || format != "ROW" {
		return feed.Errorf(feed.EINVALID, "FEED_INBOX_ENGINE=rocksdb: the server needs its binary log on in ROW format (log_bin is %d, binlog_format %s): only the binary log makes a transaction that writes the inbox and an InnoDB table commit in both or neither across a crash: %s", logBin, format, engineAdvice)
	}
	var have map[string]string
	rows, err := db.QueryContext(ctx, `SELECT OPTION_TYPE, VALUE FROM information_schema.ROCKSDB_CF_OPTIONS WHERE CF_NAME = ?`, InboxFamily)
	if err != nil {
		return classify(err)
	}
	defer rows.Close()
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return classify(err)
		}
		if have == nil {
			have = map[string]string{}
		}
		have[k] = v
	}
	if err := rows.Err(); err != nil {
		return classify(err)
	}
	settings := map[string]string{}
	if have == nil {
		// The family is made with the table: read the settings it will
		// be made with, each name=value of the default options and then
		// of the family's own override, which wins, nested ones included.
		var defaults, overrides string
		err := db.QueryRowContext(ctx, `SELECT @@rocksdb_default_cf_options, @@rocksdb_override_cf_options`).Scan(&defaults, &overrides)
		if err != nil {
			return classify(err)
		}
		noSpaces := func(s string) string { return strings.ReplaceAll(s, " ", "") }
		all := noSpaces(defaults) + ";" + familyOverride(noSpaces(overrides), InboxFamily)
		for _, f := range strings.FieldsFunc(all, func(r rune) bool { return r == ';' || r == '{' || r == '}' }) {
			name, value, _ := strings.Cut(f, "=")
			settings[name] = value
		}
	}
	var missing []string
	for _, o := range familyOptions {
		name, value, _ := strings.Cut(o.setting, "=")
		if have != nil && have[o.name] != o.want || have == nil && settings[name] != value {
			missing = append(missing, o.setting)
		}
	}
	if len(missing) > 0 {
		return feed.Errorf(feed.EINVALID, "FEED_INBOX_ENGINE=rocksdb: column family %s lacks %s: %s", InboxFamily, strings.Join(missing, ", "), engineAdvice)
	}
	return nil
}

// familyOverride returns the options of family in rocksdb_override_cf_options
// ("a={…};b={…}"), without their braces: "" when it has none.
func familyOverride(overrides, family string) string {
	depth, start := 0, 0
	for i := 0; i <= len(overrides); i++ {
		switch {
		case i < len(overrides) && overrides[i] == '{':
			depth++
		case i < len(overrides) && overrides[i] == '}':
			depth--
		case depth == 0 && (i == len(overrides) || overrides[i] == ';'):
			if name, opts, ok := strings.Cut(overrides[start:i], "="); ok && name == family {
				return strings.TrimSuffix(strings.TrimPrefix(opts, "{"), "}")
			}
			start = i + 1
		}
	}
	return ""
}

// mismatch is the refusal to serve, or to convert at start, an inbox in
// another engine than the setting's.
func mismatch(cur, e Engine) error {
	return fmt.Errorf("the inbox is in %s, the setting says %s: run feedd migrate with FEED_INBOX_ENGINE=%s to convert it online", cur, e, e)
}

// inboxEngine returns the engine the inbox table is in.
func inboxEngine(ctx context.Context, db *sqlx.DB) (Engine, error) {
	var name string
	err := db.QueryRowContext(ctx, `SELECT ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'inbox'`).Scan(&name)
	if err != nil {
		return "", err
	}
	return ParseEngine(name)
}

// ConvertProgress is a conversion's progress on one database: rows copied
// of about Estimate.
type ConvertProgress struct {
	Database       string
	To             Engine
	Rows, Estimate int64
	Done           bool
}

// convertChunk is the inbox rows one copy transaction moves: a short lock
// on that many rows of a few users.
const convertChunk = 1000

// The copy's table and the triggers that keep it current while the copy runs.
const (
	convertTable  = "inbox_convert"
	convertInsert = "inbox_convert_ins"
	convertUpdate = "inbox_convert_upd"
	convertDelete = "inbox_convert_del"
)

const inboxCols = "user_id, publish_time, content_id, author_id, kind, last_read_at, active_since, floor_time, floor_id, pulls, follows"

// newCols is inboxCols as a trigger's NEW row.
var newCols = "NEW." + strings.ReplaceAll(inboxCols, ", ", ", NEW.")

const oldKey = "user_id = OLD.user_id AND publish_time = OLD.publish_time AND content_id = OLD.content_id"

// alterSQL moves a table with the inbox's key to e, naming the column
// family of its primary key in RocksDB (and dropping the name in InnoDB).
func (e Engine) alterSQL(table string) string {
	family := ""
	if e == RocksDB {
		family = " COMMENT 'cfname=" + InboxFamily + "'"
	}
	return "ALTER TABLE " + table + " ENGINE = " + e.sqlName() + ", DROP PRIMARY KEY, ADD " + inboxKey + family
}

// convertSetup creates the copy in e and the triggers that mirror every
// write of the inbox into it, each in the writer's transaction.
func convertSetup(e Engine) []string {
	return []string{
		"CREATE TABLE " + convertTable + " LIKE inbox",
		e.alterSQL(convertTable),
		"CREATE TRIGGER " + convertInsert + " AFTER INSERT ON inbox FOR EACH ROW REPLACE INTO " + convertTable + " (" + inboxCols + ") VALUES (" + newCols + ")",
		"CREATE TRIGGER " + convertUpdate + " AFTER UPDATE ON inbox FOR EACH ROW BEGIN DELETE FROM " + convertTable + " WHERE " + oldKey + "; REPLACE INTO " + convertTable + " (" + inboxCols + ") VALUES (" + newCols + "); END",
		"CREATE TRIGGER " + convertDelete + " AFTER DELETE ON inbox FOR EACH ROW DELETE FROM " + convertTable + " WHERE " + oldKey,
	}
}

// dropConversion removes what a conversion cut short left: its triggers
// (on the inbox before the swap, on inbox_old after it), the copy and the
// old table. Servers without triggers (TiDB) never have any.
func dropConversion(ctx context.Context, db *sqlx.DB) error {
	var n int
	err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN ('`+convertTable+`', 'inbox_old')`).Scan(&n)
	if err != nil || n == 0 {
		return err
	}
	for _, q := range []string{
		"DROP TRIGGER IF EXISTS " + convertInsert,
		"DROP TRIGGER IF EXISTS " + convertUpdate,
		"DROP TRIGGER IF EXISTS " + convertDelete,
		"DROP TABLE IF EXISTS " + convertTable + ", inbox_old",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

// convertCopySQL reads the next chunk of the inbox after a key, locking its
// rows: a write to one of them waits for the chunk's commit and its trigger
// then updates the copy, so the copy never keeps a row a writer changed.
const convertCopySQL = `SELECT ` + inboxCols + ` FROM inbox
 WHERE user_id > ? OR (user_id = ? AND (publish_time > ? OR (publish_time = ? AND content_id > ?)))
 ORDER BY user_id, publish_time, content_id LIMIT ? FOR UPDATE`

// inboxRecord is a whole inbox row, header columns included.
type inboxRecord struct {
	UserID      uint64        `db:"user_id"`
	PublishTime int64         `db:"publish_time"`
	ContentID   uint64        `db:"content_id"`
	AuthorID    uint64        `db:"author_id"`
	Kind        string        `db:"kind"`
	LastReadAt  sql.NullInt64 `db:"last_read_at"`
	ActiveSince sql.NullInt64 `db:"active_since"`
	FloorTime   sql.NullInt64 `db:"floor_time"`
	FloorID     sql.NullInt64 `db:"floor_id"`
	Pulls       sql.NullInt16 `db:"pulls"`
	Follows     sql.NullInt64 `db:"follows"`
}

func (r inboxRecord) args() []any {
	return []any{r.UserID, r.PublishTime, r.ContentID, r.AuthorID, r.Kind, r.LastReadAt, r.ActiveSince, r.FloorTime, r.FloorID, r.Pulls, r.Follows}
}

// convertInbox moves the shard's inbox to engine e while the service reads
// and writes it, as online schema change tools do: a copy in e that
// triggers keep current, filled in primary-key chunks, then swapped in by
// one atomic RENAME. A conversion cut short starts over. It refuses to run
// beside a reshard, whose capture triggers would not follow the swap, and,
// without progress, to convert a populated inbox. An empty inbox is altered
// in place.
func convertInbox(ctx context.Context, sh *Shard, e Engine, log *slog.Logger, progress func(ConvertProgress)) error {
	if err := dropConversion(ctx, sh.DB); err != nil {
		return err
	}
	cur, err := inboxEngine(ctx, sh.DB)
	if err != nil || cur == e {
		return err
	}
	if err := checkEngine(ctx, sh.DB, e); err != nil {
		return err
	}
	var rows int
	if err := sh.DB.QueryRowContext(ctx, `SELECT COUNT(*) FROM (SELECT 1 FROM inbox LIMIT 1) AS one`).Scan(&rows); err != nil {
		return err
	}
	if rows == 0 {
		// A new database: nothing to copy online.
		_, err := sh.DB.ExecContext(ctx, e.alterSQL("inbox"))
		return err
	}
	if progress == nil {
		return mismatch(cur, e)
	}
	var others int
	err = sh.DB.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = DATABASE() AND EVENT_OBJECT_TABLE = 'inbox'`).Scan(&others)
	if err != nil {
		return err
	}
	if others > 0 {
		return fmt.Errorf("the inbox has %d triggers of a reshard under way: finish or abort it before changing the inbox engine", others)
	}
	for _, q := range convertSetup(e) {
		if _, err := sh.DB.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	var estimate int64
	if err := sh.DB.QueryRowContext(ctx, `SELECT COALESCE(MAX(TABLE_ROWS), 0) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'inbox'`).Scan(&estimate); err != nil {
		return err
	}
	log.Info("store: converting the inbox", "database", sh.Name, "from", cur, "to", e, "rows_estimate", estimate)
	report := func(p ConvertProgress) {
		p.Database, p.To, p.Estimate = sh.Name, e, max(estimate, p.Rows)
		progress(p)
	}
	var last inboxRecord
	var copied int64
	for first := true; ; first = false {
		var chunk []inboxRecord
		err := sh.inTx(ctx, func(tx *sqlx.Tx) error {
			chunk = chunk[:0]
			from := last
			if first {
				// Below every key: user ids start at 1.
				from = inboxRecord{PublishTime: -1 << 63}
			}
			if err := sqlx.SelectContext(ctx, tx, &chunk, convertCopySQL, from.UserID, from.UserID, from.PublishTime, from.PublishTime, from.ContentID, convertChunk); err != nil || len(chunk) == 0 {
				return err
			}
			args := make([]any, 0, 11*len(chunk))
			for _, r := range chunk {
				args = append(args, r.args()...)
			}
			_, err := tx.ExecContext(ctx, sqlconn.MultiRowInsert("INSERT IGNORE INTO "+convertTable+" ("+inboxCols+")", 11, len(chunk), ""), args...)
			return err
		})
		if err != nil {
			return err
		}
		if len(chunk) == 0 {
			break
		}
		last = chunk[len(chunk)-1]
		copied += int64(len(chunk))
		report(ConvertProgress{Rows: copied})
	}
	if err := swapInbox(ctx, sh); err != nil {
		return err
	}
	report(ConvertProgress{Rows: copied, Done: true})
	log.Info("store: converted the inbox", "database", sh.Name, "to", e, "rows", copied)
	return nil
}

// swapInbox puts the copy in the inbox's place in one RENAME, which waits
// for the transactions using the inbox and holds new ones for its moment,
// then drops the old table and its triggers. A short lock wait keeps a
// long transaction from stalling the service behind the RENAME; it is
// tried again.
func swapInbox(ctx context.Context, sh *Shard) error {
	conn, err := sh.DB.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SET SESSION lock_wait_timeout = 2"); err != nil {
		return err
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), "SET SESSION lock_wait_timeout = DEFAULT")
	for attempt := 1; ; attempt++ {
		_, err = conn.ExecContext(ctx, "RENAME TABLE inbox TO inbox_old, "+convertTable+" TO inbox")
		if err == nil || mysqlErrno(err) != errLockWaitTimeout || attempt == 10 {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	if err != nil {
		return err
	}
	return dropConversion(ctx, sh.DB)
}
