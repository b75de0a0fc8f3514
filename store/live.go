package store

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/feedhq/feed"
)

var streamStates = map[int]string{streamPreview: feed.StreamPreview, streamLive: feed.StreamLive, streamReplay: feed.StreamReplay}

// ReplayKind is the kind of a replay's delivery. It is outside the post
// kinds' alphabet, so no post has it: the fan-out that copies a delivery's
// kind into its tasks writes deliveries of this kind into the viewers'
// replays lists instead of their inboxes.
const ReplayKind = "@replay"

// MaxQueuedStreams bounds the previews and live streams one host holds at a
// time: every first page of a follower snapshots them all. The count is a
// consistent read, so creations of one host at the same instant may pass it
// together.
const MaxQueuedStreams = 50

// TransitionBound bounds a stream's creation, start and end: each runs its
// statements within it of the server time it records (created_at,
// started_srv, ended_srv) or rolls back, so a reader that waits longer
// after a time sees every transition recorded at or before it, unless a
// commit itself stalled past the bound (a disk flush or a replica's
// acknowledgement that slow).
const TransitionBound = 5 * time.Second

const streamCols = `host_id, stream_id, state, scheduled_start, started_at, ended_at, list, deleted, created_at, started_srv, ended_srv`

type streamRow struct {
	HostID         uint64        `db:"host_id"`
	StreamID       uint64        `db:"stream_id"`
	State          int           `db:"state"`
	ScheduledStart int64         `db:"scheduled_start"`
	StartedAt      sql.NullInt64 `db:"started_at"`
	EndedAt        sql.NullInt64 `db:"ended_at"`
	List           int           `db:"list"`
	Deleted        bool          `db:"deleted"`
	CreatedAt      int64         `db:"created_at"`
	StartedSrv     int64         `db:"started_srv"`
	EndedSrv       int64         `db:"ended_srv"`
}

// TimedStream is a stream with the server's times of its transitions (Unix
// ms by feedd's clock; 0 for one not made, or made before the times were
// kept), from which a live page takes the stream's state as of a session's
// snapshot.
type TimedStream struct {
	feed.Stream
	CreatedAt  int64
	StartedSrv int64
	EndedSrv   int64
}

func (r streamRow) timed() TimedStream {
	return TimedStream{Stream: r.stream(), CreatedAt: r.CreatedAt, StartedSrv: r.StartedSrv, EndedSrv: r.EndedSrv}
}

func (r streamRow) stream() feed.Stream {
	st := feed.Stream{StreamID: r.StreamID, HostID: r.HostID, State: streamStates[r.State], ScheduledStart: r.ScheduledStart}
	if r.StartedAt.Valid {
		st.StartedAt = &r.StartedAt.Int64
	}
	if r.EndedAt.Valid {
		st.EndedAt = &r.EndedAt.Int64
	}
	return st
}

const insertStreamSQL = `INSERT INTO streams (host_id, stream_id, state, scheduled_start, list, pos, created_at) VALUES (?, ?, ` + streamPreviewSQL + `, ?, ` + listQueueSQL + `, ?, ?)`

const parkDeliverySQL = `INSERT INTO deliveries (content_id, author_id, publish_time, kind, state, created_at) VALUES (?, ?, 0, '` + ReplayKind + `', ` + deliveryParkedSQL + `, ?)`

const lockStreamSQL = `SELECT ` + streamCols + ` FROM streams WHERE host_id = ? AND stream_id = ? FOR UPDATE`

const getStreamSQL = `SELECT ` + streamCols + ` FROM streams WHERE host_id = ? AND stream_id = ?`

const countQueueSQL = `SELECT COUNT(*) FROM streams WHERE host_id = ? AND list = ` + listQueueSQL

// CreateStream schedules a stream in the preview state on its host's
// shard. The stream's delivery row is written with it, parked: it reserves
// the id among the shard's content ids (posts and streams share them, as
// their deliveries do) and becomes the replay's delivery when the stream
// ends. With several shards the id is claimed in content_ids first, as a
// post's is.
//
// When the host has the stream already it returns the stored one and
// created=false. Returns ECONFLICT if the id names a post, another host's
// stream or a deleted stream, ELIMIT when the host has MaxQueuedStreams
// previews and live streams.
func (s *Store) CreateStream(ctx context.Context, st feed.Stream, now int64) (stored feed.Stream, created bool, err error) {
	ctx, cancel := context.WithTimeout(s.pin(ctx), TransitionBound)
	defer cancel()
	home := s.ShardOf(st.HostID)
	claimHome, err := s.claimAway(ctx, home, feed.Post{ContentID: st.StreamID, AuthorID: st.HostID}, now)
	if err != nil {
		return stored, false, wrap("create stream", err)
	}
	err = home.inTx(ctx, func(tx *sqlx.Tx) error {
		if err := claimHome(tx); err != nil {
			return err
		}
		// Insert first, look later: a locking read of a missing row would
		// lock the gap, and concurrent creators deadlock on such gaps.
		_, err := tx.ExecContext(ctx, insertStreamSQL, st.HostID, st.StreamID, st.ScheduledStart, -st.ScheduledStart, now)
		if mysqlErrno(err) == errDupEntry {
			var row streamRow
			if err := sqlx.GetContext(ctx, tx, &row, getStreamSQL, st.HostID, st.StreamID); err != nil {
				return err
			}
			if row.Deleted {
				return feed.Errorf(feed.ECONFLICT, "stream %d was deleted", st.StreamID)
			}
			stored, created = row.stream(), false
			return nil
		} else if err != nil {
			return err
		}
		var queued int
		if err := tx.GetContext(ctx, &queued, countQueueSQL, st.HostID); err != nil {
			return err
		} else if queued > MaxQueuedStreams {
			return feed.Errorf(feed.ELIMIT, "host %d has %d previews and live streams, the maximum", st.HostID, MaxQueuedStreams)
		}
		_, err = tx.ExecContext(ctx, parkDeliverySQL, st.StreamID, st.HostID, now)
		if mysqlErrno(err) == errDupEntry {
			return feed.Errorf(feed.ECONFLICT, "id %d names a post or another host's stream", st.StreamID)
		} else if err != nil {
			return err
		}
		stored, created = feed.Stream{StreamID: st.StreamID, HostID: st.HostID, State: feed.StreamPreview, ScheduledStart: st.ScheduledStart}, true
		return nil
	})
	return stored, created, wrap("create stream", err)
}

const startStreamSQL = `UPDATE streams SET state = ` + streamLiveSQL + `, started_at = ?, pos = ?, started_srv = ? WHERE host_id = ? AND stream_id = ?`

const endStreamSQL = `UPDATE streams SET state = ` + streamReplaySQL + `, ended_at = ?, list = ` + listReplaysSQL + `, pos = ?, ended_srv = ? WHERE host_id = ? AND stream_id = ?`

// unparkDeliverySQL turns an ended stream's parked delivery into a pending
// one, the outbox event that fans the replay out.
const unparkDeliverySQL = `UPDATE deliveries SET state = ` + deliveryPendingSQL + `, publish_time = ? WHERE content_id = ? AND state = ` + deliveryParkedSQL

// retireParkedSQL ends a deleted stream's parked delivery as a finished
// retraction (it was never pushed): its tombstone lasts from then on
// (PurgeTombstones).
const retireParkedSQL = `UPDATE deliveries SET state = ` + deliveryDoneSQL + `, retract = 1, claimed_until = ? WHERE content_id = ? AND state = ` + deliveryParkedSQL

// StartStream takes a preview live at startedAt, the server's clock
// reading now.
//
// Returns ENOTFOUND for a stream the host does not have (or deleted),
// ECONFLICT unless it is a preview.
func (s *Store) StartStream(ctx context.Context, hostID, streamID uint64, startedAt, now int64) (feed.Stream, error) {
	return s.moveStream(ctx, hostID, streamID, streamPreview, func(tx *sqlx.Tx, row *streamRow) error {
		row.State, row.StartedAt = streamLive, sql.NullInt64{Int64: startedAt, Valid: true}
		_, err := tx.ExecContext(ctx, startStreamSQL, startedAt, startedAt, now, hostID, streamID)
		return err
	})
}

// EndStream ends a live stream at endedAt, the server's clock reading now:
// it moves to the host's replay list and its delivery, in the same
// transaction, becomes pending, so the replay reaches the followers'
// replays lists by the posts' fan-out.
//
// Returns ENOTFOUND for a stream the host does not have (or deleted),
// ECONFLICT unless it is live, EINVALID if endedAt is before its start.
func (s *Store) EndStream(ctx context.Context, hostID, streamID uint64, endedAt, now int64) (feed.Stream, error) {
	return s.moveStream(ctx, hostID, streamID, streamLive, func(tx *sqlx.Tx, row *streamRow) error {
		if endedAt < row.StartedAt.Int64 {
			return feed.Errorf(feed.EINVALID, "ended_at must not be before started_at (%d)", row.StartedAt.Int64)
		}
		row.State, row.EndedAt = streamReplay, sql.NullInt64{Int64: endedAt, Valid: true}
		if _, err := tx.ExecContext(ctx, endStreamSQL, endedAt, endedAt, now, hostID, streamID); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, unparkDeliverySQL, endedAt, streamID)
		return err
	})
}

// moveStream locks a stream of the host, checks that it is in state from
// and applies move to it, in one transaction on the host's shard.
func (s *Store) moveStream(ctx context.Context, hostID, streamID uint64, from int, move func(tx *sqlx.Tx, row *streamRow) error) (feed.Stream, error) {
	ctx, cancel := context.WithTimeout(s.pin(ctx), TransitionBound)
	defer cancel()
	var out feed.Stream
	err := s.ShardOf(hostID).inTx(ctx, func(tx *sqlx.Tx) error {
		row, err := lockStream(ctx, tx, hostID, streamID)
		if err != nil {
			return err
		}
		if row.State != from {
			return feed.Errorf(feed.ECONFLICT, "stream %d is %s, not %s", streamID, streamStates[row.State], streamStates[from])
		}
		if err := move(tx, &row); err != nil {
			return err
		}
		out = row.stream()
		return nil
	})
	return out, wrap("move stream", err)
}

// lockStream locks a stream of the host that is not deleted.
//
// Returns ENOTFOUND otherwise.
func lockStream(ctx context.Context, tx *sqlx.Tx, hostID, streamID uint64) (streamRow, error) {
	var row streamRow
	err := sqlx.GetContext(ctx, tx, &row, lockStreamSQL, hostID, streamID)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && row.Deleted) {
		return row, feed.Errorf(feed.ENOTFOUND, "stream %d of host %d not found", streamID, hostID)
	}
	return row, err
}

const deleteStreamSQL = `UPDATE streams SET deleted = 1, list = ` + listNoneSQL + ` WHERE host_id = ? AND stream_id = ?`

// DeleteStream takes a stream off every list in one transaction on the
// host's shard: its host's queue or replay list at once and, for a replay,
// the followers' replays lists by the retraction of its delivery, as a
// deleted post's (DeletePost takes the same locks in the same order).
// Deleting a deleted stream does nothing.
//
// Returns ENOTFOUND if the host never created it.
func (s *Store) DeleteStream(ctx context.Context, hostID, streamID uint64, now int64) error {
	ctx = s.pin(ctx)
	err := s.ShardOf(hostID).inTx(ctx, func(tx *sqlx.Tx) error {
		var row streamRow
		err := sqlx.GetContext(ctx, tx, &row, lockStreamSQL, hostID, streamID)
		if errors.Is(err, sql.ErrNoRows) {
			return feed.Errorf(feed.ENOTFOUND, "stream %d of host %d not found", streamID, hostID)
		} else if err != nil || row.Deleted {
			return err
		}
		if _, err := tx.ExecContext(ctx, deleteStreamSQL, hostID, streamID); err != nil {
			return err
		}
		if row.State != streamReplay {
			// A stream that never ended has no replay to retract.
			_, err := tx.ExecContext(ctx, retireParkedSQL, max(now, 1), streamID)
			return err
		}
		return retractDelivery(ctx, tx, streamID)
	})
	return wrap("delete stream", err)
}

// GetStream returns a stream of the host.
//
// Returns ENOTFOUND if it does not exist or was deleted.
func (s *Store) GetStream(ctx context.Context, hostID, streamID uint64) (feed.Stream, error) {
	var row streamRow
	err := sqlx.GetContext(ctx, s.ShardOf(hostID).pool(ctx), &row, getStreamSQL, hostID, streamID)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && row.Deleted) {
		return feed.Stream{}, feed.Errorf(feed.ENOTFOUND, "stream %d of host %d not found", streamID, hostID)
	}
	return row.stream(), wrap("get stream", err)
}

// queueChunk bounds the hosts of one snapshot statement: MariaDB turns an
// IN list of 1,000 values into a join.
const queueChunk = 500

// snapshotStreamsSQL reads, for many hosts, their queues (one range of
// idx_streams_list per host) and their replays that ended after a server
// time (one range of idx_streams_ended per host).
const snapshotStreamsSQL = `SELECT ` + streamCols + ` FROM streams WHERE host_id IN (?) AND list = ` + listQueueSQL + `
UNION ALL
SELECT ` + streamCols + ` FROM streams WHERE host_id IN (?) AND ended_srv > ? AND list = ` + listReplaysSQL

// SnapshotStreams returns the hosts' streams that a live session's
// snapshot at server time since can hold, in no particular order: their
// previews and live streams, and their replays that ended after since.
// The hosts of a database are read with one statement per 500, the
// databases in parallel, each within timeout when it is above zero. A
// stream both halves of the statement return (an index entry paired with
// a newer row, see readStreams) is returned once.
//
// Returns EUNAVAILABLE if a database holding some host fails.
func (s *Store) SnapshotStreams(ctx context.Context, hosts []uint64, since int64, timeout time.Duration) ([]TimedStream, error) {
	keep := func(r streamRow) bool {
		return r.List == listQueue || (r.List == listReplays && r.EndedSrv > since)
	}
	rows, err := readStreams(ctx, s, hostSources(hosts, feed.Key{}), keep, timeout, func(ctx context.Context, sh *Shard, srcs []PullSource) ([]streamRow, int, error) {
		return runChunks(ctx, chunked(srcs, queueChunk), func(ctx context.Context, chunk []PullSource) ([]streamRow, int, error) {
			ids := make([]uint64, len(chunk))
			for i, src := range chunk {
				ids[i] = src.AuthorID
			}
			q, args, err := sqlx.In(snapshotStreamsSQL, ids, ids, since)
			if err != nil {
				return nil, 0, err
			}
			var rows []streamRow
			err = sqlx.SelectContext(ctx, sh.pool(ctx), &rows, q, args...)
			return rows, 1, err
		})
	})
	streams := make([]TimedStream, 0, len(rows))
	seen := make(map[uint64]bool, len(rows))
	for _, r := range rows {
		if !seen[r.StreamID] {
			seen[r.StreamID] = true
			streams = append(streams, r.timed())
		}
	}
	return streams, err
}

// hostReplaysPartSQL is one host's part of a replays statement: its
// newest replays below a bound, a backward range of idx_streams_list.
const hostReplaysPartSQL = `(SELECT ` + streamCols + ` FROM streams
WHERE host_id = ? AND list = ` + listReplaysSQL + ` AND (pos < ? OR (pos = ? AND stream_id < ?))
ORDER BY pos DESC, stream_id DESC LIMIT ?)`

// HostReplays returns up to limit replays of each host below its source's
// Before key (ended_at, stream_id), newest first per host: the hosts' own
// replay lists, which pages read where a viewer's replays list is not
// complete. Hosts of a database are read with one UNION ALL statement per
// 64, the databases in parallel.
//
// Returns EUNAVAILABLE if a database holding some host fails.
func (s *Store) HostReplays(ctx context.Context, sources []PullSource, limit int, timeout time.Duration) ([]feed.Stream, error) {
	keep := func(r streamRow) bool { return r.List == listReplays }
	rows, err := readStreams(ctx, s, sources, keep, timeout, func(ctx context.Context, sh *Shard, srcs []PullSource) ([]streamRow, int, error) {
		return runChunks(ctx, chunked(srcs, pullChunk), func(ctx context.Context, chunk []PullSource) ([]streamRow, int, error) {
			parts := make([]string, len(chunk))
			args := make([]any, 0, 5*len(chunk))
			for i, src := range chunk {
				parts[i] = hostReplaysPartSQL
				args = append(args, src.AuthorID, src.Before.PublishTime, src.Before.PublishTime, src.Before.ContentID, limit)
			}
			var rows []streamRow
			err := sqlx.SelectContext(ctx, sh.pool(ctx), &rows, strings.Join(parts, " UNION ALL "), args...)
			return rows, 1, err
		})
	})
	streams := make([]feed.Stream, len(rows))
	for i, r := range rows {
		streams[i] = r.stream()
	}
	return streams, err
}

// hostSources names each host as a source read below before.
func hostSources(hosts []uint64, before feed.Key) []PullSource {
	srcs := make([]PullSource, len(hosts))
	for i, h := range hosts {
		srcs[i] = PullSource{AuthorID: h, Before: before}
	}
	return srcs
}

// readStreams runs read on each database's share of the sources (see
// readShards) and fails the whole read if any database failed: a live
// feed page has no partial form.
//
// read selects rows by an index of streams; those that keep does not take
// (a row in another list than its index entry said) are dropped. A server
// reads an index entry and its row at one snapshot, so none should be, but
// TiDB's in-process unistore engine can pair the index entry a commit
// wrote with the row from before that commit, and a replay without an end
// would follow.
func readStreams(ctx context.Context, s *Store, sources []PullSource, keep func(streamRow) bool, timeout time.Duration,
	read func(ctx context.Context, sh *Shard, srcs []PullSource) ([]streamRow, int, error)) ([]streamRow, error) {
	rows, out, err := readShards(ctx, s, sources, timeout, read)
	if err != nil {
		return nil, err
	}
	if out.Err != nil {
		return nil, errors.Join(feed.Errorf(feed.EUNAVAILABLE, "a database of the followed hosts is unavailable"), out.Err)
	}
	return slices.DeleteFunc(rows, func(r streamRow) bool { return !keep(r) }), nil
}

// LiveStreams returns, by id, those of the given streams (named by host and
// id) that are not deleted, as they are now, with one statement per
// database of their hosts.
func (s *Store) LiveStreams(ctx context.Context, streams []feed.Stream) (map[uint64]feed.Stream, error) {
	byShard := map[*Shard][]any{}
	for _, st := range streams {
		sh := s.ShardOf(st.HostID)
		byShard[sh] = append(byShard[sh], st.HostID, st.StreamID)
	}
	out := make(map[uint64]feed.Stream, len(streams))
	for sh, args := range byShard {
		q := "SELECT " + streamCols + " FROM streams WHERE deleted = 0 AND ((host_id = ? AND stream_id = ?)" +
			strings.Repeat(" OR (host_id = ? AND stream_id = ?)", len(args)/2-1) + ")"
		var rows []streamRow
		if err := sqlx.SelectContext(ctx, sh.pool(ctx), &rows, q, args...); err != nil {
			return nil, wrap("live streams", err)
		}
		for _, r := range rows {
			out[r.StreamID] = r.stream()
		}
	}
	return out, nil
}

// HostEdge is a host a viewer follows, with the edge's pull bits.
type HostEdge struct {
	HostID uint64 `db:"author_id"`
	Pull   int    `db:"pull"`
}

const followedHostsSQL = `SELECT author_id, pull FROM following WHERE user_id = ? AND muted = 0`

// FollowedHosts returns the authors the viewer follows and does not filter
// out (mute or hide), with their pull bits.
func (s *Store) FollowedHosts(ctx context.Context, userID uint64) ([]HostEdge, error) {
	var out []HostEdge
	err := sqlx.SelectContext(ctx, s.ShardOf(userID).pool(ctx), &out, followedHostsSQL, userID)
	return out, wrap("followed hosts", err)
}
