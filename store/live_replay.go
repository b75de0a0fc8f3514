package store

import (
	"context"
	"database/sql"
	"errors"
	"math"
	"slices"

	"github.com/jmoiron/sqlx"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/store/sqlconn"
)

// A viewer's replays list is what fan-out pushed of the followed hosts'
// replays: a replay's delivery (kind ReplayKind) runs through the posts'
// planner, tasks and push policy, and its writes land here instead of the
// inbox, with the same follow check (the author's edges in the batch's
// range, one range of following's primary key, muted ones left out, read
// FOR UPDATE so that an unfollow's purge of the replays waits for the
// write).

// pushReplaySQL is pushSQL for a replay.
const pushReplaySQL = `INSERT IGNORE INTO replays (user_id, ended_at, stream_id, host_id)
SELECT f.user_id, ?, ?, ? FROM following f FORCE INDEX (PRIMARY)
WHERE f.author_id = ? AND f.user_id > ? AND f.user_id <= ? AND f.muted = 0 FOR UPDATE`

// pushActiveReplaySQL is pushActiveSQL for a replay: followers whose inbox
// header says they read at or after a cutoff.
const pushActiveReplaySQL = `INSERT IGNORE INTO replays (user_id, ended_at, stream_id, host_id)
SELECT f.user_id, ?, ?, ? FROM following f FORCE INDEX (PRIMARY) STRAIGHT_JOIN inbox u
 ON u.user_id = f.user_id AND u.publish_time = 9223372036854775807 AND u.content_id = 18446744073709551615
WHERE f.author_id = ? AND f.user_id > ? AND f.user_id <= ? AND f.muted = 0 AND u.last_read_at >= ? FOR UPDATE`

// retractReplaySQL is retractSQL for a replay.
const retractReplaySQL = `DELETE r FROM following f FORCE INDEX (PRIMARY) STRAIGHT_JOIN replays r
 ON r.user_id = f.user_id AND r.ended_at = ? AND r.stream_id = ?
WHERE f.author_id = ? AND f.user_id > ? AND f.user_id <= ?`

// purgeHostReplaysSQL removes a host's replays from a viewer's list, as
// purgeAuthorSQL does a followed author's posts from the inbox when the
// edge goes or is muted: reads leave them out anyway, and the list keeps
// no rows nothing reads.
const purgeHostReplaysSQL = `DELETE FROM replays WHERE user_id = ? AND host_id = ?`

// writeReplays is writeInboxes for a replay's task: its publish time is the
// stream's ended_at, its content id the stream's id.
func writeReplays(ctx context.Context, ex sqlx.ExecerContext, t *Task, through uint64, activeAfter int64) (sql.Result, error) {
	switch {
	case t.Retract:
		return ex.ExecContext(ctx, retractReplaySQL, t.PublishTime, t.ContentID, t.AuthorID, t.LastUser, through)
	case t.Mode == ModePushActive:
		return ex.ExecContext(ctx, pushActiveReplaySQL, t.PublishTime, t.ContentID, t.AuthorID, t.AuthorID, t.LastUser, through, activeAfter)
	default:
		return ex.ExecContext(ctx, pushReplaySQL, t.PublishTime, t.ContentID, t.AuthorID, t.AuthorID, t.LastUser, through)
	}
}

// noFloor is the floor of a replays list that is complete: below every key.
var noFloor = feed.Key{PublishTime: math.MinInt64}

const ensureReplayFloorSQL = `INSERT IGNORE INTO replay_floors (user_id, floor_time, floor_id) VALUES (?, ?, 0)`

const lockReplayFloorSQL = `SELECT floor_time, floor_id FROM replay_floors WHERE user_id = ? FOR UPDATE`

const setReplayFloorSQL = `UPDATE replay_floors SET floor_time = ?, floor_id = ? WHERE user_id = ?`

// lockReplayFloor locks the viewer's floor row, creating it (complete) if
// missing, and returns the floor: the lock trims and backfills of one
// replays list take first.
func lockReplayFloor(ctx context.Context, tx *sqlx.Tx, userID uint64) (feed.Key, error) {
	if _, err := tx.ExecContext(ctx, ensureReplayFloorSQL, userID, noFloor.PublishTime); err != nil {
		return feed.Key{}, err
	}
	var f struct {
		Time int64  `db:"floor_time"`
		ID   uint64 `db:"floor_id"`
	}
	err := sqlx.GetContext(ctx, tx, &f, lockReplayFloorSQL, userID)
	return feed.Key{PublishTime: f.Time, ContentID: f.ID}, err
}

// replayCutSQL finds the entry ranked limit from the newest in a viewer's
// replays list: the oldest to keep.
const replayCutSQL = `SELECT ended_at, stream_id FROM replays WHERE user_id = ?
ORDER BY ended_at DESC, stream_id DESC LIMIT 1 OFFSET ?`

const cutReplaysSQL = `DELETE FROM replays WHERE user_id = ? AND (ended_at < ? OR (ended_at = ? AND stream_id < ?))`

// trimReplays cuts the viewer's replays list, whose floor tx holds, to its
// newest limit entries and raises the floor to the oldest kept, so reads
// know the list is complete only from there.
func trimReplays(ctx context.Context, tx *sqlx.Tx, userID uint64, floor feed.Key, limit int) (int64, error) {
	var cut struct {
		EndedAt  int64  `db:"ended_at"`
		StreamID uint64 `db:"stream_id"`
	}
	err := sqlx.GetContext(ctx, tx, &cut, replayCutSQL, userID, limit-1)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	} else if err != nil {
		return 0, err
	}
	k := feed.Key{PublishTime: cut.EndedAt, ContentID: cut.StreamID}
	n, err := tx.ExecContext(ctx, cutReplaysSQL, userID, k.PublishTime, k.PublishTime, k.ContentID)
	if err != nil {
		return 0, err
	}
	if floor.Less(k) {
		if _, err := tx.ExecContext(ctx, setReplayFloorSQL, k.PublishTime, k.ContentID, userID); err != nil {
			return 0, err
		}
	}
	return n.RowsAffected()
}

// TrimReplays cuts each viewer's replays list to its newest limit entries,
// one transaction per viewer under the floor's lock, and returns the rows
// deleted. Fan-out samples the lists it pushes to, as it does inboxes.
func (s *Store) TrimReplays(ctx context.Context, users []uint64, limit int) (int64, error) {
	ctx = s.pin(ctx)
	var total int64
	for _, u := range users {
		err := s.ShardOf(u).inTx(ctx, func(tx *sqlx.Tx) error {
			floor, err := lockReplayFloor(ctx, tx, u)
			if err != nil {
				return err
			}
			n, err := trimReplays(ctx, tx, u, floor, limit)
			total += n
			return err
		})
		if err != nil {
			return total, wrap("trim replays", err)
		}
	}
	return total, nil
}

// hostsWithReplaysSQL finds which of a list of hosts have a replay: one
// look into each host's range of idx_streams_list, where HostReplays'
// statement reads each host's list with a part of its own.
const hostsWithReplaysSQL = `SELECT DISTINCT host_id FROM streams WHERE host_id IN (?) AND list = ` + listReplaysSQL

// hostsWithReplays returns the hosts (sorted) that have replays: most
// authors a batch of follows backfills have none, and their parts of
// HostReplays' statements cost more than this look at all of them.
func (s *Store) hostsWithReplays(ctx context.Context, hosts []uint64) ([]uint64, error) {
	var out []uint64
	for sh, ids := range s.groupByShard(hosts) {
		for chunk := range slices.Chunk(ids, 1000) {
			var got []uint64
			if err := selectIn(ctx, sh.pool(ctx), &got, hostsWithReplaysSQL, chunk); err != nil {
				return nil, err
			}
			out = append(out, got...)
		}
	}
	slices.Sort(out)
	return out, nil
}

const insertReplaysHead = `INSERT IGNORE INTO replays (user_id, ended_at, stream_id, host_id)`

const heldReplaysSQL = `SELECT user_id, stream_id, host_id FROM replays WHERE `

const deleteReplaySQL = `DELETE FROM replays WHERE user_id = ? AND stream_id = ? AND host_id = ?`

// BackfillReplays copies, for each pair (viewer, host) of viewers of sh,
// the host's newest replays (at most limit) into the viewer's replays
// list, under the floor's lock and the following row's (so an unfollow or
// a mute cannot slip between the check and the copy; nothing is copied
// for an edge that is gone or muted), raising the floor to the oldest
// copied when the host had limit replays or more, and trims the list back
// to limit. It then drops every replay of the pairs' hosts that the lists
// hold and the hosts have deleted: a retraction sweeps only live edges, so
// one that ran while the viewer did not follow the host left its replay
// behind. The hosts' lists are read at once, and the lists held with one
// statement a chunk of pairs. Run it while the edges are still pending
// backfill (reads merge the hosts' own lists meanwhile), before the posts'
// backfill clears the bits.
func (s *Store) BackfillReplays(ctx context.Context, sh *Shard, pairs [][2]uint64, limit int) (copied int64, err error) {
	ctx = s.pin(ctx)
	if len(pairs) == 0 {
		return 0, nil
	}
	var hosts []uint64
	for _, p := range pairs {
		hosts = append(hosts, p[1])
	}
	slices.Sort(hosts)
	withReplays, err := s.hostsWithReplays(ctx, slices.Compact(hosts))
	if err != nil {
		return 0, wrap("backfill replays", err)
	}
	var reps []feed.Stream
	if len(withReplays) > 0 {
		if reps, err = s.HostReplays(ctx, hostSources(withReplays, Top), limit, 0); err != nil {
			return 0, err
		}
	}
	byHost := map[uint64][]feed.Stream{}
	for _, r := range reps {
		byHost[r.HostID] = append(byHost[r.HostID], r)
	}
	for _, p := range pairs {
		if r := byHost[p[1]]; len(r) > 0 {
			n, err := copyReplays(ctx, sh, p[0], p[1], r, limit)
			copied += n
			if err != nil {
				return copied, wrap("backfill replays", err)
			}
		}
	}
	db := sh.pool(ctx)
	for chunk := range slices.Chunk(pairs, followChunk) {
		var rows []struct {
			UserID   uint64 `db:"user_id"`
			StreamID uint64 `db:"stream_id"`
			HostID   uint64 `db:"host_id"`
		}
		if err := sqlx.SelectContext(ctx, db, &rows, heldReplaysSQL+keyIn([]string{"user_id", "host_id"}, len(chunk)), flatPairs(chunk)...); err != nil || len(rows) == 0 {
			if err != nil {
				return copied, wrap("backfill replays", err)
			}
			continue
		}
		held := make([]feed.Stream, len(rows))
		for i, r := range rows {
			held[i] = feed.Stream{StreamID: r.StreamID, HostID: r.HostID}
		}
		live, err := s.LiveStreams(ctx, held)
		if err != nil {
			return copied, err
		}
		for _, r := range rows {
			if _, ok := live[r.StreamID]; ok {
				continue
			}
			if _, err := db.ExecContext(ctx, deleteReplaySQL, r.UserID, r.StreamID, r.HostID); err != nil {
				return copied, wrap("backfill replays", err)
			}
		}
	}
	return copied, nil
}

// copyReplays is BackfillReplays' transaction on the viewer's database.
func copyReplays(ctx context.Context, sh *Shard, userID, hostID uint64, reps []feed.Stream, limit int) (copied int64, err error) {
	err = sh.inTx(ctx, func(tx *sqlx.Tx) error {
		copied = 0
		floor, err := lockReplayFloor(ctx, tx, userID)
		if err != nil {
			return err
		}
		var muted bool
		err = tx.GetContext(ctx, &muted, lockFollowingSQL, userID, hostID)
		if errors.Is(err, sql.ErrNoRows) || (err == nil && muted) {
			return nil
		} else if err != nil {
			return err
		}
		if len(reps) >= limit {
			if k := ReplayKey(reps[len(reps)-1]); floor.Less(k) {
				if _, err := tx.ExecContext(ctx, setReplayFloorSQL, k.PublishTime, k.ContentID, userID); err != nil {
					return err
				}
				floor = k
			}
		}
		if copied, err = sqlconn.InsertRows(ctx, tx, insertReplaysHead, 4, "", len(reps), func(i int) []any {
			r := reps[i]
			return []any{userID, *r.EndedAt, r.StreamID, r.HostID}
		}); err != nil {
			return err
		}
		_, err = trimReplays(ctx, tx, userID, floor, limit)
		return err
	})
	return copied, err
}

// ReplayKey is a replay's position in a replays list and in the replay
// part of a live feed.
func ReplayKey(st feed.Stream) feed.Key {
	return feed.Key{PublishTime: *st.EndedAt, ContentID: st.StreamID}
}

// replaysPageSQL reads a viewer's replays list below a key and, in the same
// statement (one snapshot), the list's floor, marked by host_id 0.
const replaysPageSQL = `(SELECT ended_at, stream_id, host_id FROM replays
WHERE user_id = ? AND (ended_at < ? OR (ended_at = ? AND stream_id < ?))
ORDER BY ended_at DESC, stream_id DESC LIMIT ?)
UNION ALL (SELECT floor_time, floor_id, 0 FROM replay_floors WHERE user_id = ?)`

// ReplaysPage is a read of a viewer's replays list.
type ReplaysPage struct {
	Items []feed.Stream // newest first, state replay
	// Floor is the key at and above which the list holds every replay
	// pushed to it; below it the hosts' own lists must be read. Nil: the
	// list is complete.
	Floor *feed.Key
}

// ReadReplays returns up to limit entries of the viewer's replays list
// below before, with the list's floor, read in one statement.
func (s *Store) ReadReplays(ctx context.Context, userID uint64, before feed.Key, limit int) (ReplaysPage, error) {
	rows, err := s.ShardOf(userID).pool(ctx).QueryContext(ctx, replaysPageSQL,
		userID, before.PublishTime, before.PublishTime, before.ContentID, limit, userID)
	if err != nil {
		return ReplaysPage{}, wrap("read replays", err)
	}
	defer rows.Close()
	var page ReplaysPage
	for rows.Next() {
		var (
			ended        int64
			stream, host uint64
		)
		if err := rows.Scan(&ended, &stream, &host); err != nil {
			return ReplaysPage{}, wrap("read replays", err)
		}
		if host == 0 {
			if ended > noFloor.PublishTime {
				page.Floor = &feed.Key{PublishTime: ended, ContentID: stream}
			}
			continue
		}
		page.Items = append(page.Items, feed.Stream{StreamID: stream, HostID: host, State: feed.StreamReplay, EndedAt: &ended})
	}
	return page, wrap("read replays", rows.Err())
}
