// Package shardmap is sharding.yaml: the databases of a deployment, which
// virtual shards each owns, and how an id hashes to its virtual shard. It
// needs no database and no domain knowledge.
package shardmap

import (
	"cmp"
	"crypto/cipher"
	"crypto/des"
	"encoding/binary"
	"fmt"
	"math/bits"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// DefaultVirtualShards is the virtual shard count of a new deployment. It is
// fixed for the life of the data: resharding moves whole virtual shards
// between databases and never re-hashes an id.
const DefaultVirtualShards = 1024

// Default pool sizes per database and process, unless sharding.yaml says
// otherwise. Reads get the most: a page holds its connection for about a
// millisecond, and readers are most of the traffic. Workers need more than
// --worker-concurrency (a fan-out batch holds a connection of its author's
// database while it takes one of each recipient's).
const (
	DefaultReadConns    = 16
	DefaultWriteConns   = 8
	DefaultWorkersConns = 16
)

// Map is sharding.yaml: the databases and which virtual shards each owns.
type Map struct {
	// VirtualShards is the fixed number of virtual shards, a power of two.
	VirtualShards int `yaml:"virtual_shards"`
	// Databases by name. A DSN may use ${VAR} to take secrets from the environment.
	Databases map[string]Database `yaml:"databases"`
	// Ranges assigns every virtual shard to exactly one database.
	Ranges []Range `yaml:"ranges"`
	// InboxEngine is the engine of every database's inbox (empty: InnoDB).
	// It comes from FEED_INBOX_ENGINE, not from the file: it is the
	// deployment's, and the same for every database.
	// The store parses and checks it.
	InboxEngine string `yaml:"-"`
}

// Database is one MySQL server (or schema) holding some virtual shards.
type Database struct {
	DSN         string      `yaml:"dsn"`
	Connections Connections `yaml:"connections"`
}

// Connections sizes a database's pools, one per connection class, in connections each
// feedd process opens at most; zero means the default.
type Connections struct {
	Read    int `yaml:"read"`
	Write   int `yaml:"write"`
	Workers int `yaml:"workers"`
}

// WithDefaults returns c with every unset size set to its default.
func (c Connections) WithDefaults() Connections {
	return Connections{
		Read:    cmp.Or(c.Read, DefaultReadConns),
		Write:   cmp.Or(c.Write, DefaultWriteConns),
		Workers: cmp.Or(c.Workers, DefaultWorkersConns),
	}
}

// Range maps the inclusive virtual shard range "first-last" (or a single
// number) to a database.
type Range struct {
	VShards  string `yaml:"vshards"`
	Database string `yaml:"database"`
}

// Single puts every virtual shard on one database: the layout used
// when FEED_SHARDING is not set.
func Single(dsn string) *Map {
	return &Map{
		VirtualShards: DefaultVirtualShards,
		Databases:     map[string]Database{"main": {DSN: dsn}},
		Ranges:        []Range{{VShards: fmt.Sprintf("0-%d", DefaultVirtualShards-1), Database: "main"}},
	}
}

// Load reads and validates a sharding.yaml, expanding ${VAR} in DSNs.
func Load(path string) (*Map, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("sharding: %w", err)
	}
	return Parse(b)
}

// Parse parses and validates sharding.yaml content. A database
// may own no range: one a reshard is to move virtual shards to, or one it
// emptied that still holds rows until cleanup. Running processes need
// every database a reshard may route to listed.
func Parse(b []byte) (*Map, error) {
	var m Map
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("sharding: parse: %w", err)
	}
	for name, db := range m.Databases {
		db.DSN = expandEnv(db.DSN)
		m.Databases[name] = db
	}
	if _, err := m.Owners(); err != nil {
		return nil, err
	}
	return &m, nil
}

// envRef matches ${NAME} only: a bare $ is common in passwords and stays as is.
var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// expandEnv replaces each ${NAME} with the environment variable's value.
func expandEnv(s string) string {
	return envRef.ReplaceAllStringFunc(s, func(ref string) string {
		return os.Getenv(ref[2 : len(ref)-1])
	})
}

// Owners validates the map and returns the database name of every
// virtual shard, indexed by virtual shard.
func (m *Map) Owners() ([]string, error) {
	n := m.VirtualShards
	if n < 1 || n > 1<<16 || bits.OnesCount(uint(n)) != 1 {
		return nil, fmt.Errorf("sharding: virtual_shards must be a power of two in 1..65536, got %d", n)
	}
	if len(m.Databases) == 0 {
		return nil, fmt.Errorf("sharding: no databases")
	}
	for name, db := range m.Databases {
		if db.DSN == "" {
			return nil, fmt.Errorf("sharding: database %q has no dsn", name)
		}
		if c := db.Connections; c.Read < 0 || c.Write < 0 || c.Workers < 0 {
			return nil, fmt.Errorf("sharding: database %q: connections must be >= 0", name)
		}
	}
	owner := make([]string, n)
	for _, r := range m.Ranges {
		first, last, err := parseRange(r.VShards)
		if err != nil {
			return nil, err
		}
		if _, ok := m.Databases[r.Database]; !ok {
			return nil, fmt.Errorf("sharding: range %s: unknown database %q", r.VShards, r.Database)
		}
		if last >= n {
			return nil, fmt.Errorf("sharding: range %s: beyond virtual_shards %d", r.VShards, n)
		}
		for v := first; v <= last; v++ {
			if owner[v] != "" {
				return nil, fmt.Errorf("sharding: virtual shard %d is in two ranges (%s and %s)", v, owner[v], r.Database)
			}
			owner[v] = r.Database
		}
	}
	if i := slices.Index(owner, ""); i >= 0 {
		return nil, fmt.Errorf("sharding: virtual shard %d is in no range", i)
	}
	return owner, nil
}

func parseRange(s string) (first, last int, err error) {
	lo, hi, isRange := strings.Cut(strings.TrimSpace(s), "-")
	first, err = strconv.Atoi(strings.TrimSpace(lo))
	if err == nil {
		last = first
		if isRange {
			last, err = strconv.Atoi(strings.TrimSpace(hi))
		}
	}
	if err != nil || first < 0 || last < first {
		return 0, 0, fmt.Errorf("sharding: bad vshards %q: want \"first-last\" with 0 <= first <= last", s)
	}
	return first, last, nil
}

// nullDES is the block cipher of Vitess's "hash" vindex: DES with an all-zero
// key. Using the same keyspace id means a later move to vtgate keeps every row
// where it is.
var nullDES = func() cipher.Block {
	b, err := des.NewCipher(make([]byte, 8))
	if err != nil {
		panic(err)
	}
	return b
}()

// KeyspaceID returns the 64-bit keyspace id of a user or author id, equal to
// Vitess's hash vindex.
func KeyspaceID(id uint64) uint64 {
	var in, out [8]byte
	binary.BigEndian.PutUint64(in[:], id)
	nullDES.Encrypt(out[:], in[:])
	return binary.BigEndian.Uint64(out[:])
}

// VirtualShard maps an id to one of n (a power of two) virtual shards: the
// top bits of its keyspace id, so virtual shard ranges are keyspace-id ranges.
func VirtualShard(id uint64, n int) int {
	if n == 1 {
		return 0
	}
	return int(KeyspaceID(id) >> (64 - bits.TrailingZeros(uint(n))))
}

// FormatLayout is the canonical text of a layout given the database of
// every virtual shard.
func FormatLayout(names []string) string {
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

// ParseLayout is the inverse of FormatLayout: the database of every
// virtual shard.
func ParseLayout(layout string) ([]string, error) {
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

// FromLayout is the map that places virtual shards as layout says, on the
// databases of dsns (by name).
func FromLayout(layout string, dsns map[string]string) (*Map, error) {
	names, err := ParseLayout(layout)
	if err != nil {
		return nil, err
	}
	m := &Map{VirtualShards: len(names), Databases: map[string]Database{}}
	for name, dsn := range dsns {
		m.Databases[name] = Database{DSN: dsn}
	}
	for _, f := range strings.Fields(FormatLayout(names))[1:] {
		r, name, _ := strings.Cut(f, "=")
		if _, ok := m.Databases[name]; !ok {
			return nil, fmt.Errorf("the layout places virtual shards on database %s, which the shard map lacks", name)
		}
		m.Ranges = append(m.Ranges, Range{VShards: r, Database: name})
	}
	return m, nil
}
