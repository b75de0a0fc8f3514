package main

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"
)

// phase is one measurement of feedbench: a letter of -phases and a section
// of the report.
type phase struct {
	letter   byte
	name     string // the title of its section in the report
	measures string // what it measures, for -help
	// targets are the make targets whose runs select it (Makefile's
	// -phases; make bench runs every phase).
	targets []string
	// loads: it reads or writes the inboxes the run loads before any phase.
	loads bool
	// afterLoad, when set, runs right after the load, before any phase.
	afterLoad func(*bench, context.Context) error
	run       func(*bench, context.Context) error
	// notOnTiDB, when set, says why the phase cannot run on TiDB; there the
	// report says so in its section instead.
	notOnTiDB string
}

// phases run in this order, which gives each the tables it needs: D's
// first footprint on the freshly loaded inbox, W and C before fan-out trims
// any inbox, P (on readers of its own) while the server is at rest, S on the
// loaded users' own feeds, L on hosts and viewers of its own, A on full
// inboxes, B and M after them, the rest of D on what they all wrote. O, R
// and I, on databases of their own, go last; run alone they need no loaded
// inboxes.
// The report orders its sections for the reader (report.render).
var phases = []phase{
	{letter: 'W', name: "Page cost vs Redis", measures: "first pages/s, p50/p99 and CPU per request of feedd and of a minimal Go server over Redis sorted sets holding the same feeds, under wrk",
		targets: []string{"bench"}, loads: true, run: (*bench).pageCost},
	{letter: 'C', name: "Feed read throughput", measures: "feed pages/s over HTTP and in-process vs a raw prepared keyset SELECT, for inbox-only, pull, filtering and muting readers",
		targets: []string{"bench", "bench-disk", "bench-tidb"}, loads: true, run: (*bench).reads},
	{letter: 'P', name: "Deep and hybrid pages", measures: "pages below the inbox at 50 to 2,000 followees over HTTP vs the same merge in raw SQL, and phase C's hybrid pages",
		targets: []string{"bench"}, run: (*bench).deepPhase},
	{letter: 'S', name: "Feed streams", measures: "the idle cost of open feed streams, and publish → stream event and → first page latency",
		targets: []string{"bench"}, loads: true, run: (*bench).streamsPhase},
	{letter: 'L', name: "Live streams: first pages, later pages, sessions", measures: "live broadcasts' first pages at 5, 10 and 100 followed hosts vs the same k-way read in raw SQL, later pages, and the clean-up of expired sessions",
		targets: []string{"bench"}, run: (*bench).livePhase},
	{letter: 'A', name: "Fan-out throughput", measures: "rows/s of the service's fan-out workers vs raw multi-row INSERT IGNORE, into full inboxes and inboxes with room",
		targets: []string{"bench", "bench-disk", "bench-tidb"}, loads: true, run: (*bench).fanout},
	{letter: 'B', name: "Publish → visible", measures: "latency over HTTP from a publish to the post on a follower's page, for a 1k and a 100k follower author",
		targets: []string{"bench"}, loads: true, run: (*bench).latency},
	{letter: 'M', name: "Many small posts", measures: "publishing vs delivery rate at 1, 10 and 100 followers per post, vs raw multi-row INSERT IGNORE of the same rows",
		targets: []string{"bench"}, loads: true, run: (*bench).smallPosts},
	{letter: 'D', name: "Disk bytes per inbox row", measures: "as loaded, after the other phases, after OPTIMIZE TABLE, and at the steady state of fan-out and retention",
		targets: []string{"bench", "bench-disk"}, loads: true, afterLoad: (*bench).footprintAsLoaded, run: (*bench).diskPhase},
	{letter: 'O', name: "Open-loop mix", measures: "per-operation latency from scheduled times of an open-loop social mix at rising rates on a power-law follow graph, feedd beside the Redis anchor, and the feeds checked exact",
		targets: []string{"bench", "soak-mix"}, run: (*bench).mixPhase},
	{letter: 'R', name: "Reshard copy rate", measures: "store/reshard's copy of half the virtual shards to a second database vs raw INSERT … SELECT, on databases of its own",
		targets: []string{"bench"}, run: (*bench).resharding,
		notOnTiDB: "store/reshard fences stale writers with triggers, which TiDB does not have"},
	{letter: 'I', name: "Bulk import", measures: "records/s of feedd import's service.Import into an empty database vs LOAD DATA of the same following, followers, posts and inbox rows",
		targets: []string{"bench"}, run: (*bench).importing},
}

// phaseLetters are the letters of every phase, in alphabetical order.
func phaseLetters() string {
	var b []byte
	for _, ph := range phases {
		b = append(b, ph.letter)
	}
	slices.Sort(b)
	return string(b)
}

// phaseName is the title of the phase's section.
func phaseName(letter byte) string {
	i := slices.IndexFunc(phases, func(ph phase) bool { return ph.letter == letter })
	return phases[i].name
}

// runPhases loads the data if a phase asked for needs it, then runs the
// phases asked for in the table's order. A phase the server cannot run is
// recorded as not available, with the reason.
func (b *bench) runPhases(ctx context.Context) error {
	var asked []phase
	for _, ph := range phases {
		switch {
		case !b.opt.runs(ph.letter):
		case b.rep.Server.TiDB && ph.notOnTiDB != "":
			b.rep.Unavailable[ph.letter] = ph.notOnTiDB
			b.log.Warn("feedbench: phase not available on TiDB", "phase", string(ph.letter), "why", ph.notOnTiDB)
		default:
			asked = append(asked, ph)
		}
	}
	b.data = newDataset(b.opt.Users, time.Now())
	if slices.ContainsFunc(asked, func(ph phase) bool { return ph.loads }) {
		if err := b.load(ctx); err != nil {
			return err
		}
	}
	for _, ph := range asked {
		if ph.afterLoad != nil {
			if err := ph.afterLoad(b, ctx); err != nil {
				return fmt.Errorf("phase %c: %w", ph.letter, err)
			}
		}
	}
	for _, ph := range asked {
		if err := ph.run(b, ctx); err != nil {
			return fmt.Errorf("phase %c: %w", ph.letter, err)
		}
	}
	return nil
}

// usage prints the flags and the phases.
func usage(fs *flag.FlagSet) func() {
	return func() {
		w := fs.Output()
		fmt.Fprintf(w, "Usage: feedbench [flags]\n\nPhases (-phases), in the order they run, and the make targets that run them:\n\n")
		for _, ph := range phases {
			fmt.Fprintf(w, "  %c  %s — %s (make %s)\n", ph.letter, ph.name, ph.measures, strings.Join(ph.targets, ", "))
		}
		fmt.Fprintf(w, "\nFlags:\n")
		fs.PrintDefaults()
	}
}
