package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/feedhq/feed/service"
	"github.com/feedhq/feed/store"
)

// envDSN names the variable holding the server DSN, as `make bench` sets it.
const envDSN = "FEED_TEST_MYSQL_DSN"

// options are feedbench's settings. The defaults finish in well under ten
// minutes on a 2-core machine; -quick shrinks every size for a smoke run.
type options struct {
	DSN    string
	Out    string
	Keep   bool
	Quick  bool
	Phases string
	Seed   uint64

	// Data (phases C and D, and the inboxes phase A writes into).
	Users     int // users with a loaded inbox
	InboxRows int // loaded inbox rows per user

	// Phase A.
	FanoutAuthors   int
	FanoutFollowers int
	Rounds          int
	Workers         int
	InboxSlack      int

	// Phase B.
	FollowersSmall int
	FollowersBig   int
	RepsSmall      int
	RepsBig        int

	// Phase M.
	SmallAuthors int
	SmallPosts   int // posts per scenario, at most
	SmallRows    int // inbox rows per scenario, at most: bounds the posts of big audiences

	// Phase C.
	Clients     int
	ReaderUsers int // users per reader class
	Pages       int // pages a reader session reads before picking another user
	PullPosts   int // posts per pull author
	Duration    time.Duration
	Warmup      time.Duration
	Slices      int // the runs take turns in this many slices of Duration
	Diagnostics bool

	// Phase D.
	Optimize        bool
	SteadyUsers     int // users of the steady-state database
	SteadyLimit     int // their inbox limit
	SteadyAuthors   int // small authors there (besides two followed by everyone)
	SteadyFollows   int // small authors each user follows
	SteadyTurnovers int // times fan-out replaces every inbox after filling it

	// Phase S.
	Streams     int           // streams open at once
	StreamIdle  time.Duration // the window their idle cost is measured over
	StreamPosts int           // posts timed to their events

	// Phase L.
	LiveViewers int // viewers per followee count

	// Phase R.
	ReshardUsers     int // users of the source database
	ReshardInboxRows int // inbox rows per user there

	// Phase I.
	ImportUsers   int // users of the generated file
	ImportFollows int // authors each follows
	ImportPosts   int // posts each publishes

	deepOptions // phase P
	mixOptions  // phase O
	wrkOptions  // phase W

	InboxEngine string // the service's FEED_INBOX_ENGINE

	// Disk: make bench-disk (disk.go).
	Disk       bool
	DiskDir    string
	RocksDBCnf string

	// make bench-tidb (tidb.go): the server measured beside TiDB, which DSN names.
	TiDBBeside string

	CPUProfile string
}

func defaultOptions() options {
	return options{
		Out:              "docs/BENCHMARKS.md",
		Phases:           phaseLetters(),
		Seed:             1,
		Users:            10000,
		InboxRows:        300,
		FanoutAuthors:    20,
		FanoutFollowers:  5000,
		Rounds:           8,
		Workers:          service.WorkersDefault,
		InboxSlack:       service.InboxSlackDefault,
		FollowersSmall:   1000,
		FollowersBig:     100000,
		RepsSmall:        200,
		RepsBig:          100,
		SmallAuthors:     1000,
		SmallPosts:       20000,
		SmallRows:        200000,
		Clients:          8,
		ReaderUsers:      2000,
		Pages:            3,
		PullPosts:        40,
		Duration:         10 * time.Second,
		Warmup:           2 * time.Second,
		Slices:           10,
		Diagnostics:      true,
		Optimize:         true,
		SteadyUsers:      2000,
		SteadyLimit:      service.InboxLimitDefault,
		SteadyAuthors:    100,
		SteadyFollows:    20,
		SteadyTurnovers:  2,
		ReshardUsers:     3000,
		ReshardInboxRows: 100,
		ImportUsers:      10000,
		ImportFollows:    50,
		ImportPosts:      30,
		Streams:          2000,
		StreamIdle:       10 * time.Second,
		StreamPosts:      200,
		LiveViewers:      200,
		InboxEngine:      string(store.InnoDB),

		DiskDir:    ".data/bench-disk",
		RocksDBCnf: "deploy/rocksdb.cnf",
	}
}

// quickSizes replace the defaults of flags not given explicitly under -quick.
var quickSizes = map[string]string{
	"users":              "400",
	"inbox-rows":         "30",
	"fanout-authors":     "2",
	"fanout-followers":   "300",
	"rounds":             "2",
	"followers-small":    "100",
	"followers-big":      "2000",
	"reps-small":         "3",
	"reps-big":           "2",
	"small-authors":      "20",
	"small-posts":        "200",
	"small-rows":         "2000",
	"reader-users":       "100",
	"pull-posts":         "5",
	"duration":           "700ms",
	"warmup":             "200ms",
	"slices":             "2",
	"reshard-users":      "100",
	"reshard-inbox-rows": "10",
	"import-users":       "300",
	"import-follows":     "10",
	"import-posts":       "5",
	"streams":            "20",
	"stream-idle":        "500ms",
	"stream-posts":       "3",
	"live-viewers":       "10",
	"steady-users":       "100",
	"steady-limit":       "20",
	"steady-authors":     "10",
	"steady-follows":     "3",
	"steady-turnovers":   "1",
	"deep-followees":     "20,60",
	"deep-depth":         "400",
	"deep-walks":         "1",
	"mix-users":          "200",
	"mix-followees":      "20",
	"mix-seeds":          "2",
	"mix-rates":          "100,200",
	"mix-duration":       "3s",
	"mix-check":          "50",
	"wrk-duration":       "2s",
	"wrk-slices":         "1",
}

func parseOptions(args []string, stderr io.Writer) (options, error) {
	o := defaultOptions()
	fs := flag.NewFlagSet("feedbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = usage(fs)
	fs.StringVar(&o.DSN, "dsn", "", "server DSN without a database name (default $"+envDSN+"; unset: a mariadbd of its own)")
	fs.StringVar(&o.Out, "out", o.Out, "report file to write")
	fs.BoolVar(&o.Keep, "keep", false, "keep the benchmark database instead of dropping it")
	fs.BoolVar(&o.Quick, "quick", false, "tiny sizes: a smoke run of a few seconds")
	fs.StringVar(&o.Phases, "phases", o.Phases, "phases to run: letters of the phases above")
	fs.Uint64Var(&o.Seed, "seed", o.Seed, "seed of the data generator")
	fs.IntVar(&o.Users, "users", o.Users, "users with a loaded inbox")
	fs.IntVar(&o.InboxRows, "inbox-rows", o.InboxRows, "inbox rows loaded per user")
	fs.IntVar(&o.FanoutAuthors, "fanout-authors", o.FanoutAuthors, "A: authors publishing one post per round")
	fs.IntVar(&o.FanoutFollowers, "fanout-followers", o.FanoutFollowers, "A: followers of each, drawn from the loaded users")
	fs.IntVar(&o.Rounds, "rounds", o.Rounds, "A: rounds, alternating which of fan-out and ceiling goes first")
	fs.IntVar(&o.Workers, "workers", o.Workers, "A: fan-out worker goroutines, and connections of the insert ceiling")
	fs.IntVar(&o.InboxSlack, "inbox-slack", o.InboxSlack, "the service's retention slack, percent of the inbox limit (feedd --inbox-slack)")
	fs.IntVar(&o.FollowersSmall, "followers-small", o.FollowersSmall, "B: followers of the small author")
	fs.IntVar(&o.FollowersBig, "followers-big", o.FollowersBig, "B: followers of the big authors")
	fs.IntVar(&o.RepsSmall, "reps-small", o.RepsSmall, "B: posts timed for the small author")
	fs.IntVar(&o.RepsBig, "reps-big", o.RepsBig, "B: posts timed for each big author")
	fs.IntVar(&o.SmallAuthors, "small-authors", o.SmallAuthors, "M: authors publishing, each followed by 1, 10 or 100 loaded users")
	fs.IntVar(&o.SmallPosts, "small-posts", o.SmallPosts, "M: posts published per audience size")
	fs.IntVar(&o.SmallRows, "small-rows", o.SmallRows, "M: inbox rows per audience size at most (fewer posts for 100 followers)")
	fs.IntVar(&o.Clients, "clients", o.Clients, "C: concurrent readers; M: concurrent publishers")
	fs.IntVar(&o.ReaderUsers, "reader-users", o.ReaderUsers, "C: users per reader class")
	fs.IntVar(&o.Pages, "pages", o.Pages, "C: pages per reader session (first page, then next pages by cursor)")
	fs.IntVar(&o.PullPosts, "pull-posts", o.PullPosts, "C: posts per pull author")
	fs.DurationVar(&o.Duration, "duration", o.Duration, "C: measured time of each reader run")
	fs.DurationVar(&o.Warmup, "warmup", o.Warmup, "C: unmeasured time before each reader run")
	fs.IntVar(&o.Slices, "slices", o.Slices, "C: the runs take turns in this many slices of -duration each, so bursts of other load hit them alike")
	fs.BoolVar(&o.Diagnostics, "diagnostics", o.Diagnostics, "C: also time store.ReadFeed and service.Feed without HTTP")
	fs.BoolVar(&o.Optimize, "optimize", o.Optimize, "D: also measure the inbox after OPTIMIZE TABLE")
	fs.IntVar(&o.SteadyUsers, "steady-users", o.SteadyUsers, "D: users whose inboxes fan-out fills and turns over, on a database of their own")
	fs.IntVar(&o.SteadyLimit, "steady-limit", o.SteadyLimit, "D: their inbox limit")
	fs.IntVar(&o.SteadyAuthors, "steady-authors", o.SteadyAuthors, "D: small authors publishing to them, one post per round each")
	fs.IntVar(&o.SteadyFollows, "steady-follows", o.SteadyFollows, "D: small authors each of them follows, drawn at random")
	fs.IntVar(&o.SteadyTurnovers, "steady-turnovers", o.SteadyTurnovers, "D: times fan-out replaces every inbox after filling it")
	fs.IntVar(&o.ReshardUsers, "reshard-users", o.ReshardUsers, "R: users of the source database, each following the loaded rows' authors")
	fs.IntVar(&o.ReshardInboxRows, "reshard-inbox-rows", o.ReshardInboxRows, "R: inbox rows loaded per user of the source database (and posts per author)")
	fs.IntVar(&o.ImportUsers, "import-users", o.ImportUsers, "I: users of the generated import file")
	fs.IntVar(&o.ImportFollows, "import-follows", o.ImportFollows, "I: authors each of them follows")
	fs.IntVar(&o.ImportPosts, "import-posts", o.ImportPosts, "I: posts each of them publishes")
	fs.IntVar(&o.Streams, "streams", o.Streams, "S: feed streams open at once")
	fs.DurationVar(&o.StreamIdle, "stream-idle", o.StreamIdle, "S: how long the open streams' idle cost is measured")
	fs.IntVar(&o.StreamPosts, "stream-posts", o.StreamPosts, "S: posts timed from publish to their stream event")
	fs.IntVar(&o.LiveViewers, "live-viewers", o.LiveViewers, "L: viewers following each of 5, 10 and 100 hosts")
	o.deepOptions.flags(fs)
	o.mixOptions.flags(fs)
	o.wrkOptions.flags(fs)
	fs.StringVar(&o.InboxEngine, "inbox-engine", o.InboxEngine, "the inbox table's engine, innodb or rocksdb (feedd --inbox-engine)")
	fs.BoolVar(&o.Disk, "disk", false, "make bench-disk: start a server of its own with small caches and direct I/O, run the phases for each inbox engine, write the side-by-side section into -out")
	fs.StringVar(&o.DiskDir, "disk-dir", o.DiskDir, "-disk: the server's data directory (on the disk to measure; emptied first)")
	fs.StringVar(&o.RocksDBCnf, "rocksdb-cnf", o.RocksDBCnf, "-disk: the server's option file")
	fs.StringVar(&o.TiDBBeside, "tidb-beside", "", "make bench-tidb: -dsn is TiDB; run the phases on this server DSN (MariaDB) first, then on TiDB, and write the side-by-side section into -out")
	fs.StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if o.Quick {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		for name, v := range quickSizes {
			if !set[name] {
				if err := fs.Set(name, v); err != nil {
					return o, err
				}
			}
		}
	}
	if o.DSN == "" {
		o.DSN = os.Getenv(envDSN)
	}
	o.Phases = strings.ToUpper(o.Phases)
	if e, err := store.ParseEngine(o.InboxEngine); err == nil {
		o.InboxEngine = string(e)
	}
	return o, o.validate()
}

func (o options) validate() error {
	if _, err := store.ParseEngine(o.InboxEngine); err != nil {
		return fmt.Errorf("-inbox-engine: %w", err)
	}
	switch {
	case o.Users < 1 || o.InboxRows < 1:
		return fmt.Errorf("-users and -inbox-rows must be >= 1")
	case o.FanoutFollowers > o.Users || o.FollowersSmall > o.Users:
		return fmt.Errorf("-fanout-followers and -followers-small must be <= -users (%d)", o.Users)
	case 4*o.ReaderUsers > o.Users:
		return fmt.Errorf("-reader-users × 4 classes must be <= -users (%d)", o.Users)
	case o.FanoutAuthors < 1 || o.FanoutFollowers < 1 || o.Rounds < 1 || o.Workers < 1:
		return fmt.Errorf("-fanout-authors, -fanout-followers, -rounds and -workers must be >= 1")
	case o.FanoutAuthors > roomAuthorBase-fanoutAuthorBase:
		return fmt.Errorf("-fanout-authors must be <= %d", roomAuthorBase-fanoutAuthorBase)
	case o.SmallAuthors < 1 || o.SmallAuthors > smallAuthorStride || o.SmallPosts < 1 || o.SmallRows < smallAudiences[len(smallAudiences)-1]:
		return fmt.Errorf("-small-authors must be 1..%d, -small-posts >= 1, -small-rows >= %d", smallAuthorStride, smallAudiences[len(smallAudiences)-1])
	case smallAudiences[len(smallAudiences)-1] > o.Users:
		return fmt.Errorf("-users must be >= %d for phase M", smallAudiences[len(smallAudiences)-1])
	case o.FollowersSmall < 1 || o.FollowersBig < 1 || o.RepsSmall < 1 || o.RepsBig < 1:
		return fmt.Errorf("-followers-* and -reps-* must be >= 1")
	case o.Clients < 1 || o.ReaderUsers < 1 || o.Pages < 1 || o.PullPosts < 1 || o.Slices < 1:
		return fmt.Errorf("-clients, -reader-users, -pages, -pull-posts and -slices must be >= 1")
	case o.Duration <= 0 || o.Warmup < 0:
		return fmt.Errorf("-duration must be > 0 and -warmup >= 0")
	case o.ReshardUsers < 1 || o.ReshardInboxRows < 1:
		return fmt.Errorf("-reshard-users and -reshard-inbox-rows must be >= 1")
	case o.ImportUsers < 2 || o.ImportFollows < 1 || o.ImportFollows >= o.ImportUsers || o.ImportPosts < 0:
		return fmt.Errorf("-import-users must be >= 2, -import-follows in 1..-import-users-1, -import-posts >= 0")
	case strings.Trim(o.Phases, phaseLetters()) != "":
		return fmt.Errorf("-phases takes letters of %s, got %q", phaseLetters(), o.Phases)
	case o.SteadyUsers < 1 || o.SteadyLimit < 1 || o.SteadyFollows < 1 || o.SteadyFollows > o.SteadyAuthors || o.SteadyTurnovers < 1:
		return fmt.Errorf("-steady-users, -steady-limit, -steady-follows and -steady-turnovers must be >= 1, -steady-follows <= -steady-authors")
	case o.Disk && !o.Diagnostics:
		return fmt.Errorf("-disk compares fan-out with the ceiling with retention, which -diagnostics runs")
	case o.LiveViewers < 1:
		return fmt.Errorf("-live-viewers must be >= 1")
	case o.Streams < 1 || o.Streams > o.Users || o.StreamPosts < 1 || o.StreamIdle <= 0:
		return fmt.Errorf("-streams must be in 1..-users (%d), -stream-posts >= 1 and -stream-idle > 0", o.Users)
	}
	if err := o.mixOptions.validate(); err != nil {
		return err
	}
	if err := o.wrkOptions.validate(); err != nil {
		return err
	}
	return o.deepOptions.validate()
}

func (o options) runs(phase byte) bool { return strings.IndexByte(o.Phases, phase) >= 0 }
