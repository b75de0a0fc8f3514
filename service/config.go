// Package service holds the rules of the feed: publishing, following, the
// merged read, and the workers that fan posts out. It has no SQL and no HTTP:
// the store runs the statements, httpapi speaks the protocol.
package service

import (
	"fmt"
	"time"
)

// Defaults of Config, from the run contract where it names them.
const (
	InboxLimitDefault    = 300
	InboxSlackDefault    = 20
	PushThresholdDefault = 10000
	ActiveDaysDefault    = 7
	MaxFollowingDefault  = 2000
	MaxMutedDefault      = 10000
	TaskSizeDefault      = 1000
	BatchSizeDefault     = 1000
	WorkersDefault       = 4
	LeaseDefault         = 30 * time.Second
	PollIntervalDefault  = time.Second
	// ClockSkewDefault bounds how far in the future a publish_time may be,
	// and is the margin reads allow between app servers' clocks.
	ClockSkewDefault = time.Minute
	// PullCacheTTLDefault keeps pull authors' newest posts in memory this long.
	PullCacheTTLDefault = time.Second
	// TombstoneTTLDefault keeps a deleted post's tombstone a day after its
	// retraction finished: a DELETE repeated within it still answers 204.
	TombstoneTTLDefault = 24 * time.Hour
	// ProbeIntervalDefault and ProbeTimeoutDefault: readiness is at most
	// about two seconds behind a database that stops answering.
	ProbeIntervalDefault = time.Second
	ProbeTimeoutDefault  = time.Second
	// SourceTimeoutDefault bounds what a hung database the probes have not
	// reported yet adds to a feed page; a pull statement takes about a
	// millisecond at rest.
	SourceTimeoutDefault = 500 * time.Millisecond
	// LiveSessionTTLDefault is how long a live-feed session's snapshot
	// serves later pages.
	LiveSessionTTLDefault = 30 * time.Minute
	// MaxStreamsPerUserDefault is a browser's connection limit per host:
	// a user's tabs and devices, not a client opening streams in a loop.
	MaxStreamsPerUserDefault = 16
	// MaxStreamsDefault bounds one process's open streams, each about
	// 60 KB and a descriptor.
	MaxStreamsDefault = 10_000
)

// maxActiveDays bounds ActiveDays: the window is computed as a
// time.Duration, which overflows past about 106,751 days and would turn
// every follower inactive (or active) at random.
const maxActiveDays = 36500

// markReadTimeout bounds the write a feed read makes to mark its user
// active (about a millisecond at rest), so a write stall the probes have not
// reported yet delays reads by this much at most.
const markReadTimeout = 250 * time.Millisecond

// activityGranularity throttles the write a feed read makes to mark its user
// active: a read within this time of the last recorded one writes nothing.
const activityGranularity = 10 * time.Minute

// Config tunes the service and its workers.
type Config struct {
	// InboxLimit is how many newest entries an inbox keeps; reads past them
	// continue from the followed authors' outboxes.
	InboxLimit int
	// InboxSlack is the mean overshoot above InboxLimit that retention
	// allows, in percent of it: the higher, the rarer the trim checks (each
	// ranks InboxLimit entries) and the more rows an inbox holds meanwhile.
	InboxSlack int
	// PushThreshold: an author with more followers pushes only to active ones.
	PushThreshold int64
	// ActiveDays: a user who read their feed within this many days is active.
	// Zero makes authors above the threshold pure pull.
	ActiveDays int
	// MaxFollowing caps how many authors one user follows.
	MaxFollowing int
	// MaxMuted caps how many authors one user mutes.
	MaxMuted int
	// TaskSize is how many followers one fan-out sub-task covers.
	TaskSize int
	// BatchSize is how many followers one sub-task transaction writes.
	BatchSize int
	// Workers is the number of fan-out loops per shard, and of follow-event
	// loops, and how many deliveries one shard plans at a time.
	Workers int
	// Lease is how long a claim lasts before another worker may take over.
	Lease time.Duration
	// PollInterval is how often idle workers look for work they were not woken for.
	PollInterval time.Duration
	// ClockSkew: see ClockSkewDefault.
	ClockSkew time.Duration
	// PullCacheTTL is how long a process reuses a pull author's newest
	// posts for reads; its own publishes and deletes refresh them at once.
	// Zero reads the outboxes for every page.
	PullCacheTTL time.Duration
	// ProbeInterval is how often each database is probed for readiness.
	ProbeInterval time.Duration
	// ProbeTimeout bounds a probe's read and write: a database slower than
	// that is reported down.
	ProbeTimeout time.Duration
	// NodeID (0..8191) makes server-assigned content ids unique across
	// processes; -1 picks one at random.
	NodeID int
	// PartialReads serves a feed page without the followed authors whose
	// database does not answer, naming them, where false fails the page.
	// The reader's own database is required either way.
	PartialReads bool
	// SourceTimeout bounds the reads of one database's outboxes for a feed
	// page.
	SourceTimeout time.Duration
	// TombstoneTTL is how long a deleted post's rows stay after its
	// retraction finished; then the post is forgotten and its id is free.
	TombstoneTTL time.Duration
	// LiveSessionTTL is how long after its first page a live-feed session
	// serves later pages; then it is gone (410) and clean-up deletes it.
	LiveSessionTTL time.Duration
	// MaxStreamsPerUser caps the feed streams one user holds open in the
	// process, and MaxStreams the process's streams of all users: past
	// either, an open is refused (ESTREAMS).
	MaxStreamsPerUser int
	MaxStreams        int
}

// DefaultConfig returns the contract's defaults.
func DefaultConfig() Config {
	return Config{
		InboxLimit:     InboxLimitDefault,
		InboxSlack:     InboxSlackDefault,
		PushThreshold:  PushThresholdDefault,
		ActiveDays:     ActiveDaysDefault,
		MaxFollowing:   MaxFollowingDefault,
		MaxMuted:       MaxMutedDefault,
		TaskSize:       TaskSizeDefault,
		BatchSize:      BatchSizeDefault,
		Workers:        WorkersDefault,
		Lease:          LeaseDefault,
		PollInterval:   PollIntervalDefault,
		ClockSkew:      ClockSkewDefault,
		PullCacheTTL:   PullCacheTTLDefault,
		ProbeInterval:  ProbeIntervalDefault,
		ProbeTimeout:   ProbeTimeoutDefault,
		NodeID:         -1,
		PartialReads:   true,
		SourceTimeout:  SourceTimeoutDefault,
		LiveSessionTTL: LiveSessionTTLDefault,
		TombstoneTTL:   TombstoneTTLDefault,

		MaxStreamsPerUser: MaxStreamsPerUserDefault,
		MaxStreams:        MaxStreamsDefault,
	}
}

// Validate reports the first setting out of range.
func (c Config) Validate() error {
	switch {
	case c.InboxLimit < 1:
		return fmt.Errorf("inbox limit must be >= 1, got %d", c.InboxLimit)
	case c.InboxSlack < 1 || c.InboxSlack > 100:
		return fmt.Errorf("inbox slack must be 1..100 (percent of the inbox limit), got %d", c.InboxSlack)
	case c.PushThreshold < 0:
		return fmt.Errorf("push threshold must be >= 0, got %d", c.PushThreshold)
	case c.ActiveDays < 0 || c.ActiveDays > maxActiveDays:
		return fmt.Errorf("active days must be 0..%d, got %d", maxActiveDays, c.ActiveDays)
	case c.MaxFollowing < 1:
		return fmt.Errorf("max following must be >= 1, got %d", c.MaxFollowing)
	case c.MaxMuted < 1:
		return fmt.Errorf("max muted must be >= 1, got %d", c.MaxMuted)
	case c.TaskSize < 1 || c.BatchSize < 1:
		return fmt.Errorf("task size and batch size must be >= 1")
	case c.Workers < 1:
		return fmt.Errorf("workers must be >= 1, got %d", c.Workers)
	case c.Lease < 100*time.Millisecond:
		return fmt.Errorf("lease must be >= 100ms, got %s", c.Lease)
	case c.PollInterval <= 0:
		return fmt.Errorf("poll interval must be > 0")
	case c.ClockSkew < 0:
		return fmt.Errorf("clock skew must be >= 0")
	case c.TombstoneTTL < time.Minute:
		return fmt.Errorf("tombstone ttl must be >= 1m (a backfill racing a delete reads the tombstone), got %s", c.TombstoneTTL)
	case c.PullCacheTTL < 0 || c.PullCacheTTL > 2*time.Second:
		return fmt.Errorf("pull cache ttl must be 0..2s (deletes must leave feeds within 2 s), got %s", c.PullCacheTTL)
	case c.ProbeInterval <= 0 || c.ProbeTimeout <= 0:
		return fmt.Errorf("probe interval and probe timeout must be > 0")
	case c.NodeID < -1 || c.NodeID > maxNodeID:
		return fmt.Errorf("node id must be -1 (random) or 0..%d, got %d", maxNodeID, c.NodeID)
	case c.SourceTimeout <= 0:
		return fmt.Errorf("source timeout must be > 0, got %s", c.SourceTimeout)
	case c.LiveSessionTTL <= 0:
		return fmt.Errorf("live session ttl must be > 0, got %s", c.LiveSessionTTL)
	case c.MaxStreamsPerUser < 1 || c.MaxStreams < c.MaxStreamsPerUser:
		return fmt.Errorf("max streams per user must be >= 1 and max streams >= it, got %d and %d", c.MaxStreamsPerUser, c.MaxStreams)
	}
	return nil
}

// TrimEvery is the mean number of pushes into one inbox between trim
// checks: each push checks with probability 1/TrimEvery, so an inbox
// overshoots its limit by a geometric number of entries (mean TrimEvery-1,
// about InboxSlack percent of the limit) and trimming costs about one
// deleted row per pushed one, with no scan of idle users. A check ranks the
// inbox's newest InboxLimit entries, so checks cost InboxLimit/TrimEvery =
// 100/InboxSlack rows read per pushed row: the slack trades disk for
// fan-out throughput (docs/DESIGN.md, "Retention").
func (c Config) TrimEvery() int { return max(1, c.InboxLimit*c.InboxSlack/100) }
