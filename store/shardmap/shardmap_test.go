package shardmap_test

import (
	"crypto/des"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/feedhq/feed/store/shardmap"
)

func TestParseShardMap(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		yaml    string
		wantErr string // substring; "" means valid
	}{
		{
			name: "one database",
			yaml: `
virtual_shards: 1024
databases:
  main: {dsn: "u@tcp(h:3306)/feed"}
ranges:
  - {vshards: "0-1023", database: main}`,
		},
		{
			name: "two databases and single-number ranges",
			yaml: `
virtual_shards: 4
databases:
  a: {dsn: "u@tcp(a:3306)/feed", connections: {read: 10, workers: 6}}
  b: {dsn: "u@tcp(b:3306)/feed"}
ranges:
  - {vshards: "0", database: a}
  - {vshards: "1 - 2", database: b}
  - {vshards: "3", database: a}`,
		},
		{
			name: "one virtual shard",
			yaml: `
virtual_shards: 1
databases: {main: {dsn: "u@tcp(h:3306)/feed"}}
ranges: [{vshards: "0", database: main}]`,
		},
		{
			name: "gap",
			yaml: `
virtual_shards: 8
databases: {a: {dsn: x}, b: {dsn: y}}
ranges:
  - {vshards: "0-2", database: a}
  - {vshards: "4-7", database: b}`,
			wantErr: "virtual shard 3 is in no range",
		},
		{
			name: "overlap",
			yaml: `
virtual_shards: 8
databases: {a: {dsn: x}, b: {dsn: y}}
ranges:
  - {vshards: "0-4", database: a}
  - {vshards: "4-7", database: b}`,
			wantErr: "virtual shard 4 is in two ranges",
		},
		{
			name: "range beyond virtual_shards",
			yaml: `
virtual_shards: 8
databases: {a: {dsn: x}}
ranges: [{vshards: "0-8", database: a}]`,
			wantErr: "beyond virtual_shards",
		},
		{
			name: "unknown database",
			yaml: `
virtual_shards: 2
databases: {a: {dsn: x}}
ranges:
  - {vshards: "0", database: a}
  - {vshards: "1", database: b}`,
			wantErr: `unknown database "b"`,
		},
		{
			name: "database without dsn",
			yaml: `
virtual_shards: 2
databases: {a: {connections: {read: 3}}}
ranges: [{vshards: "0-1", database: a}]`,
			wantErr: `database "a" has no dsn`,
		},
		{
			name: "negative connections",
			yaml: `
virtual_shards: 2
databases: {a: {dsn: x, connections: {write: -1}}}
ranges: [{vshards: "0-1", database: a}]`,
			wantErr: "connections must be >= 0",
		},
		{
			name:    "no databases",
			yaml:    `virtual_shards: 2`,
			wantErr: "no databases",
		},
		{
			name:    "virtual_shards not a power of two",
			yaml:    "virtual_shards: 1000\ndatabases: {a: {dsn: x}}\nranges: [{vshards: \"0-999\", database: a}]",
			wantErr: "power of two",
		},
		{
			name:    "virtual_shards zero",
			yaml:    "databases: {a: {dsn: x}}\nranges: [{vshards: \"0\", database: a}]",
			wantErr: "power of two",
		},
		{
			name:    "virtual_shards negative",
			yaml:    "virtual_shards: -4\ndatabases: {a: {dsn: x}}\nranges: [{vshards: \"0\", database: a}]",
			wantErr: "power of two",
		},
		{
			name:    "virtual_shards too large",
			yaml:    "virtual_shards: 131072\ndatabases: {a: {dsn: x}}\nranges: [{vshards: \"0-131071\", database: a}]",
			wantErr: "power of two",
		},
		{name: "range reversed", yaml: rangeYAML("3-1"), wantErr: "bad vshards"},
		{name: "range open end", yaml: rangeYAML("0-"), wantErr: "bad vshards"},
		{name: "range open start", yaml: rangeYAML("-3"), wantErr: "bad vshards"},
		{name: "range negative", yaml: rangeYAML("-1-3"), wantErr: "bad vshards"},
		{name: "range not a number", yaml: rangeYAML("a-b"), wantErr: "bad vshards"},
		{name: "range empty", yaml: rangeYAML(""), wantErr: "bad vshards"},
		{name: "range with three parts", yaml: rangeYAML("0-1-3"), wantErr: "bad vshards"},
		{
			name:    "unknown top-level field",
			yaml:    "virtual_shards: 2\nshards: 2\ndatabases: {a: {dsn: x}}\nranges: [{vshards: \"0-1\", database: a}]",
			wantErr: "field shards not found",
		},
		{
			name:    "unknown database field",
			yaml:    "virtual_shards: 2\ndatabases: {a: {dsn: x, password: y}}\nranges: [{vshards: \"0-1\", database: a}]",
			wantErr: "field password not found",
		},
		{
			name:    "unknown range field",
			yaml:    "virtual_shards: 2\ndatabases: {a: {dsn: x}}\nranges: [{vshards: \"0-1\", db: a}]",
			wantErr: "field db not found",
		},
		{name: "empty document", yaml: "", wantErr: "parse"},
		{name: "not yaml", yaml: "virtual_shards: [", wantErr: "parse"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, err := shardmap.Parse([]byte(tt.yaml))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if m == nil || len(m.Databases) == 0 {
					t.Fatalf("got map %+v", m)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want one containing %q", tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %q does not contain %q", err, tt.wantErr)
			}
			if !strings.HasPrefix(err.Error(), "sharding: ") {
				t.Errorf("error %q lacks the sharding: prefix", err)
			}
		})
	}
}

// rangeYAML is a one-database map whose only range is vshards.
func rangeYAML(vshards string) string {
	return "virtual_shards: 8\ndatabases: {a: {dsn: x}}\nranges: [{vshards: \"" + vshards + "\", database: a}]"
}

// ParseShardMap expands ${VAR} in DSNs so passwords stay out of the file. Not
// parallel: t.Setenv.
func TestParseShardMapExpandsEnv(t *testing.T) {
	t.Setenv("FEED_TEST_SHARD_PASSWORD", "s3cret")
	t.Setenv("FEED_TEST_SHARD_HOST", "db1.internal")
	m, err := shardmap.Parse([]byte(`
virtual_shards: 4
databases:
  a: {dsn: "feed:${FEED_TEST_SHARD_PASSWORD}@tcp(${FEED_TEST_SHARD_HOST}:3306)/feed"}
  b: {dsn: "feed:${FEED_TEST_SHARD_UNSET}@tcp(db2:3306)/feed"}
  c: {dsn: "feed:pa$$w$x0rd@tcp(db3:3306)/feed"}
ranges:
  - {vshards: "0", database: a}
  - {vshards: "1", database: b}
  - {vshards: "2-3", database: c}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := m.Databases["a"].DSN, "feed:s3cret@tcp(db1.internal:3306)/feed"; got != want {
		t.Errorf("dsn a = %q, want %q", got, want)
	}
	if got, want := m.Databases["b"].DSN, "feed:@tcp(db2:3306)/feed"; got != want {
		t.Errorf("dsn b = %q, want %q (unset variables expand to nothing)", got, want)
	}
	if got, want := m.Databases["c"].DSN, "feed:pa$$w$x0rd@tcp(db3:3306)/feed"; got != want {
		t.Errorf("dsn c = %q, want %q (only ${NAME} expands; a bare $ stays)", got, want)
	}
}

// The keyspace id must equal Vitess's hash vindex, so a later move to vtgate
// keeps every row on its shard. Vectors from vitess
// go/vt/vtgate/vindexes/hash_test.go.
func TestKeyspaceIDMatchesVitessHash(t *testing.T) {
	t.Parallel()
	vectors := []struct {
		id   uint64
		want uint64
	}{
		{0, 0x8ca64de9c1b123a7}, // DES of the zero block under the zero key
		{1, 0x166b40b44aba4bd6},
		{2, 0x06e7ea22ce92708f},
		{3, 0x4eb190c9a2fa169c},
		{4, 0xd2fd8867d50d2dfe},
		{5, 0x70bb023c810ca87a},
	}
	for _, v := range vectors {
		if got := shardmap.KeyspaceID(v.id); got != v.want {
			t.Errorf("KeyspaceID(%d) = %#016x, want %#016x", v.id, got, v.want)
		}
	}

	// Vitess computes it with 3DES and an all-zero 24-byte key
	// (E(D(E(x))) with one key, i.e. DES): check against that construction.
	tdes, err := des.NewTripleDESCipher(make([]byte, 24))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []uint64{6, 100, 12345, 1 << 32, 1<<63 + 7, 1<<64 - 1} {
		var in, out [8]byte
		binary.BigEndian.PutUint64(in[:], id)
		tdes.Encrypt(out[:], in[:])
		if got, want := shardmap.KeyspaceID(id), binary.BigEndian.Uint64(out[:]); got != want {
			t.Errorf("KeyspaceID(%d) = %#016x, 3DES gives %#016x", id, got, want)
		}
	}
}

func TestVirtualShard(t *testing.T) {
	t.Parallel()

	t.Run("top bits of the keyspace id", func(t *testing.T) {
		t.Parallel()
		// Stable values: changing them would move every row.
		for _, v := range []struct {
			id   uint64
			n    int
			want int
		}{
			{1, 1024, 0x166b40b44aba4bd6 >> 54}, // 89
			{2, 1024, 27},
			{3, 1024, 314},
			{4, 1024, 843},
			{5, 1024, 450},
			{4, 2, 1},
			{1, 2, 0},
			{4, 65536, 0xd2fd},
		} {
			if got := shardmap.VirtualShard(v.id, v.n); got != v.want {
				t.Errorf("VirtualShard(%d, %d) = %d, want %d", v.id, v.n, got, v.want)
			}
		}
	})

	t.Run("one virtual shard", func(t *testing.T) {
		t.Parallel()
		for _, id := range []uint64{0, 1, 4, 1<<64 - 1} {
			if got := shardmap.VirtualShard(id, 1); got != 0 {
				t.Errorf("VirtualShard(%d, 1) = %d", id, got)
			}
		}
	})

	t.Run("ranges are keyspace id ranges", func(t *testing.T) {
		t.Parallel()
		// Halving the count halves the virtual shard: ranges nest.
		for id := uint64(1); id < 2000; id++ {
			if a, b := shardmap.VirtualShard(id, 1024), shardmap.VirtualShard(id, 512); a/2 != b {
				t.Fatalf("id %d: vshard %d of 1024 but %d of 512", id, a, b)
			}
		}
	})

	t.Run("even distribution", func(t *testing.T) {
		t.Parallel()
		const n, ids = 1024, 100_000
		counts := make([]int, n)
		for id := uint64(1); id <= ids; id++ {
			v := shardmap.VirtualShard(id, n)
			if v < 0 || v >= n {
				t.Fatalf("VirtualShard(%d) = %d out of range", id, v)
			}
			counts[v]++
		}
		// Mean ≈ 97.7, sd ≈ 9.9: 50..150 is about five sd either side.
		lo, hi := ids, 0
		for _, c := range counts {
			lo, hi = min(lo, c), max(hi, c)
		}
		if lo < 50 || hi > 150 {
			t.Errorf("per-vshard counts range %d..%d, want within 50..150", lo, hi)
		}
		// Sequential ids must not cluster: two halves get about half each.
		low := 0
		for _, c := range counts[:n/2] {
			low += c
		}
		if low < 49_000 || low > 51_000 {
			t.Errorf("%d of %d ids in the lower half", low, ids)
		}
	})
}
