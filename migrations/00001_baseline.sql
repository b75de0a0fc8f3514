-- The schema every shard carries. Each table lives on the shard of one key:
-- author-keyed tables (posts, deliveries, fanout_tasks, followers, authors,
-- hidden_from, streams) on the author's shard, user-keyed tables (inbox, following,
-- follow_events, mutes, markers, replays, replay_floors, live_sessions) on the user's, content_ids on the shard of
-- the content id, and health, shard_map, identity, reshard, layout_fence,
-- reshard_changes and backdates on every database. A user id and the same
-- number as an author id land on the same shard. No query joins a user-keyed table to an author-keyed one.
--
-- Times are Unix milliseconds. The tables with a kind column are ascii
-- (kinds are lower-case ascii identifiers); the others hold only integers
-- and take the database default.
--
-- The inbox is ROW_FORMAT=COMPRESSED in 8 KiB pages: pushes at each
-- inbox's newest end and trims at its oldest leave its pages about half
-- full whatever the row size, and compressed pages hold about 2.5 times the
-- entries per byte of disk (docs/BENCHMARKS.md, section D). TiDB parses
-- both options and ignores them.
--
-- MySQL commits each DDL statement implicitly, so a transaction could not
-- undo a failure half-way. The file runs without one and every statement
-- is idempotent (CREATE TABLE IF NOT EXISTS): running it again after a
-- partial failure completes the schema.
-- +goose NO TRANSACTION
-- +goose Up
CREATE TABLE IF NOT EXISTS posts (
    author_id    BIGINT UNSIGNED NOT NULL,
    publish_time BIGINT          NOT NULL COMMENT 'Unix ms, set by the author (or the server), at most clock-skew in the future',
    content_id   BIGINT UNSIGNED NOT NULL COMMENT 'names one post in the whole service (see content_ids)',
    kind         VARCHAR(32)     NOT NULL COMMENT 'post type chosen by the author, such as post or photo',
    deleted      TINYINT         NOT NULL DEFAULT 0 COMMENT '1 once deleted: the row stays so the id stays taken and DELETE stays idempotent',
    created_at   BIGINT          NOT NULL COMMENT 'Unix ms when the row was written',
    PRIMARY KEY (author_id, publish_time, content_id),
    UNIQUE KEY uk_posts_content (content_id)
) ENGINE = InnoDB DEFAULT CHARSET = ascii
  COMMENT 'author-keyed: each author outbox, newest first by the clustered key as pull reads scan it. uk_posts_content keeps content ids unique within the shard and serves lookups by id';

CREATE TABLE IF NOT EXISTS deliveries (
    content_id    BIGINT UNSIGNED NOT NULL,
    author_id     BIGINT UNSIGNED NOT NULL,
    publish_time  BIGINT          NOT NULL COMMENT 'copied from the post: the inbox key of its entries',
    kind          VARCHAR(32)     NOT NULL COMMENT 'copied from the post into its inbox entries; @replay for a stream''s replay, which fan-out writes into replays instead',
    state         TINYINT         NOT NULL DEFAULT 0 COMMENT '0 pending (to plan), 1 running (fanout_tasks exist), 2 done, 3 parked: a stream not ended yet, whose row reserves its id and becomes its replay''s delivery when it ends',
    mode          TINYINT         NOT NULL DEFAULT 0 COMMENT 'decided when planned: 0 push to every follower, 1 push_active (followers who read recently), 2 pull (push to nobody)',
    retract       TINYINT         NOT NULL DEFAULT 0 COMMENT '1 once the post is deleted: the fan-out removes it from inboxes instead of adding it',
    recipients    BIGINT          NOT NULL DEFAULT 0 COMMENT 'follower count when the delivery was planned',
    delivered     BIGINT          NOT NULL DEFAULT 0 COMMENT 'followers processed, summed from the tasks when done (while running, the tasks hold the counts)',
    claim_token   BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'random token of the planner holding the lease, 0 if none',
    claimed_until BIGINT          NOT NULL DEFAULT 0 COMMENT 'Unix ms when the lease ends and any planner may claim the row; once done, 0, or for a retraction when it finished, from which its tombstone lasts tombstone-ttl',
    attempts      INT             NOT NULL DEFAULT 0 COMMENT 'times the row was claimed',
    created_at    BIGINT          NOT NULL COMMENT 'Unix ms when the post was published',
    tasks_left    INT             NOT NULL DEFAULT 0 COMMENT 'unfinished fanout_tasks while running: the batch that takes it to 0 completes the delivery',
    PRIMARY KEY (content_id),
    KEY idx_deliveries_claim (state, claimed_until)
) ENGINE = InnoDB DEFAULT CHARSET = ascii
  COMMENT 'author-keyed: the transactional outbox of fan-out, one row per post, inserted with the post and planned into fanout_tasks';

CREATE TABLE IF NOT EXISTS fanout_tasks (
    content_id    BIGINT UNSIGNED NOT NULL,
    seq           INT             NOT NULL COMMENT 'task number within the delivery, in user_id order, then target',
    author_id     BIGINT UNSIGNED NOT NULL,
    target        VARCHAR(64)     NOT NULL COMMENT 'the database (its name in the shard map) whose inboxes the task writes: one task per range and database, so an unreachable database holds back only its own share',
    publish_time  BIGINT          NOT NULL COMMENT 'copied from the delivery',
    kind          VARCHAR(32)     NOT NULL COMMENT 'copied from the delivery',
    mode          TINYINT         NOT NULL COMMENT 'the delivery mode: 0 push, 1 push_active, 2 pull',
    retract       TINYINT         NOT NULL DEFAULT 0 COMMENT '1: remove the post from the inboxes of the range instead of adding it',
    lo            BIGINT UNSIGNED NOT NULL COMMENT 'the task covers followers with lo < user_id <= hi',
    hi            BIGINT UNSIGNED NOT NULL COMMENT 'upper bound of the range, 18446744073709551615 for the last task',
    last_user     BIGINT UNSIGNED NOT NULL COMMENT 'progress mark: users up to it are done, written with the inbox rows it covers',
    delivered     BIGINT          NOT NULL DEFAULT 0 COMMENT 'followers processed so far',
    done          TINYINT         NOT NULL DEFAULT 0 COMMENT '1 once the whole range is processed',
    claim_token   BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'random token of the worker holding the lease, 0 if none',
    claimed_until BIGINT          NOT NULL DEFAULT 0 COMMENT 'Unix ms when the lease ends and any worker may resume the task',
    attempts      INT             NOT NULL DEFAULT 0 COMMENT 'times the task was claimed',
    epoch         BIGINT          NOT NULL DEFAULT 0 COMMENT 'the layout epoch the task was planned under: a worker under another epoch plans the delivery again, since the task names target databases by that layout',
    PRIMARY KEY (content_id, seq),
    KEY idx_fanout_tasks_claim (done, claimed_until)
) ENGINE = InnoDB DEFAULT CHARSET = ascii
  COMMENT 'author-keyed: resumable fan-out sub-tasks of a delivery, one per follower range and target database, deleted when the delivery is done';

CREATE TABLE IF NOT EXISTS followers (
    author_id   BIGINT UNSIGNED NOT NULL,
    user_id     BIGINT UNSIGNED NOT NULL COMMENT 'the follower',
    followed_at BIGINT          NOT NULL COMMENT 'Unix ms of the follow',
    PRIMARY KEY (author_id, user_id)
) ENGINE = InnoDB
  COMMENT 'author-keyed: who follows the author, in user_id order for fan-out. Kept in step with following by follow_events';

CREATE TABLE IF NOT EXISTS authors (
    author_id      BIGINT UNSIGNED NOT NULL,
    follower_count BIGINT          NOT NULL DEFAULT 0 COMMENT 'rows of the author in followers',
    mode           TINYINT         NOT NULL DEFAULT 0 COMMENT '0 push, 1 switching to pull (a job sets following.pull bit 1 for every follower), 2 pull',
    switch_after   BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'switch job progress mark: followers up to this user_id are marked',
    claim_token    BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'random token of the worker leasing the switch job, 0 if none',
    claimed_until  BIGINT          NOT NULL DEFAULT 0 COMMENT 'Unix ms when the lease ends',
    attempts       INT             NOT NULL DEFAULT 0 COMMENT 'times the switch job was claimed',
    PRIMARY KEY (author_id),
    KEY idx_authors_claim (mode, claimed_until)
) ENGINE = InnoDB
  COMMENT 'author-keyed: follower count and push or pull mode of each author with followers';

CREATE TABLE IF NOT EXISTS inbox (
    user_id      BIGINT UNSIGNED NOT NULL,
    publish_time BIGINT          NOT NULL COMMENT 'the post publish_time, 9223372036854775807 in the header row',
    content_id   BIGINT UNSIGNED NOT NULL COMMENT 'the post id, 18446744073709551615 in the header row',
    author_id    BIGINT UNSIGNED NOT NULL COMMENT 'the post author, 0 in the header row',
    kind         VARCHAR(32)     NOT NULL COMMENT 'the post kind, empty in the header row',
    last_read_at BIGINT          NULL COMMENT 'header row: Unix ms of the last feed read, written at most every 10 minutes',
    active_since BIGINT          NULL COMMENT 'header row: Unix ms when the current active spell began. Pull author posts after it were pushed, older ones are merged at read time',
    floor_time   BIGINT          NULL COMMENT 'header row: publish_time of the floor, the key at and above which the inbox is complete. NULL: complete',
    floor_id     BIGINT UNSIGNED NULL COMMENT 'header row: content_id of the floor',
    pulls        TINYINT         NULL COMMENT 'header row: 1 if some following row of the user may have pull bits',
    follows      BIGINT          NULL COMMENT 'header row: the version of the list of authors the user reads, moved by every follow, unfollow, mute or hide set or lifted; processes cache the list by it',
    PRIMARY KEY (user_id, publish_time, content_id)
) ENGINE = InnoDB DEFAULT CHARSET = ascii ROW_FORMAT = COMPRESSED KEY_BLOCK_SIZE = 8
  COMMENT 'user-keyed: pushed feed entries, clustered in feed order. Each user range ends in a header row holding the user state (header columns are NULL in post rows), also the user lock';

CREATE TABLE IF NOT EXISTS following (
    user_id     BIGINT UNSIGNED NOT NULL,
    author_id   BIGINT UNSIGNED NOT NULL COMMENT 'the followed author',
    followed_at BIGINT          NOT NULL COMMENT 'Unix ms of the follow',
    pull        TINYINT         NOT NULL DEFAULT 0 COMMENT 'bits: 1 pull author (merge its posts at or before active_since at read time), 2 backfill pending (merge its whole outbox)',
    muted       TINYINT         NOT NULL DEFAULT 0 COMMENT '1 while the pair has a mutes row (the user mutes the author, or the author hides from the user): fan-out skips the edge, reads leave the author out',
    PRIMARY KEY (author_id, user_id),
    KEY idx_following_user (user_id, author_id, followed_at),
    KEY idx_following_pull (user_id, pull, muted, author_id)
) ENGINE = InnoDB
  COMMENT 'user-keyed: the authoritative follow edges, clustered by author: fan-out reads and locks the edges of one author in a range of users as one range of the primary key, so a post lands only in the inbox of a current follower. The user side reads its indexes alone';

CREATE TABLE IF NOT EXISTS follow_events (
    user_id       BIGINT UNSIGNED NOT NULL,
    author_id     BIGINT UNSIGNED NOT NULL,
    version       BIGINT          NOT NULL DEFAULT 1 COMMENT 'bumped by each follow or unfollow of the pair: the event is deleted only if unchanged since it was claimed',
    claim_token   BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'random token of the worker holding the lease, 0 if none',
    claimed_until BIGINT          NOT NULL DEFAULT 0 COMMENT 'Unix ms when the lease ends',
    attempts      INT             NOT NULL DEFAULT 0 COMMENT 'times the event was claimed',
    created_at    BIGINT          NOT NULL COMMENT 'Unix ms of the first operation queued',
    PRIMARY KEY (user_id, author_id),
    KEY idx_follow_events_claim (claimed_until)
) ENGINE = InnoDB
  COMMENT 'user-keyed: outbox of follow and unfollow, one row per pair. A worker reconciles followers and the backfill with following';

CREATE TABLE IF NOT EXISTS mutes (
    user_id   BIGINT UNSIGNED NOT NULL COMMENT 'the reader',
    author_id BIGINT UNSIGNED NOT NULL COMMENT 'the author whose posts leave the reader''s feed',
    muted_at  BIGINT          NULL COMMENT 'Unix ms when the reader muted the author; NULL: not muted',
    hidden_at BIGINT          NULL COMMENT 'Unix ms when the author hid their posts from the reader; NULL: not hidden',
    PRIMARY KEY (user_id, author_id)
) ENGINE = InnoDB
  COMMENT 'user-keyed: the reader-side facts of mute and hide, one row per pair while either holds; following.muted mirrors it in the same transactions';

CREATE TABLE IF NOT EXISTS hidden_from (
    author_id BIGINT UNSIGNED NOT NULL,
    user_id   BIGINT UNSIGNED NOT NULL COMMENT 'the reader the author hides from',
    hidden_at BIGINT          NOT NULL COMMENT 'Unix ms of the hide',
    PRIMARY KEY (author_id, user_id)
) ENGINE = InnoDB
  COMMENT 'author-keyed: whom the author hides from, for the author''s list; the reader''s mutes row is the truth, which a follow event copies here';

CREATE TABLE IF NOT EXISTS markers (
    user_id      BIGINT UNSIGNED NOT NULL,
    publish_time BIGINT          NOT NULL COMMENT 'publish_time of the marked feed position',
    content_id   BIGINT UNSIGNED NOT NULL COMMENT 'content_id of the marked feed position',
    updated_at   BIGINT          NOT NULL COMMENT 'Unix ms when the marker last moved',
    PRIMARY KEY (user_id)
) ENGINE = InnoDB
  COMMENT 'user-keyed: the read marker of each user who set one, a feed position that only moves forward';

CREATE TABLE IF NOT EXISTS content_ids (
    content_id BIGINT UNSIGNED NOT NULL,
    author_id  BIGINT UNSIGNED NOT NULL COMMENT 'the author who owns the id',
    created_at BIGINT          NOT NULL COMMENT 'Unix ms of the claim',
    PRIMARY KEY (content_id)
) ENGINE = InnoDB
  COMMENT 'keyed by content id: with several shards, publish claims the id here first, so an id names one post in the whole service. Unused with one shard';

CREATE TABLE IF NOT EXISTS health (
    id        TINYINT UNSIGNED NOT NULL COMMENT 'always 0: one row per database',
    probed_at BIGINT           NOT NULL COMMENT 'Unix ms of the last readiness probe write',
    PRIMARY KEY (id)
) ENGINE = InnoDB
  COMMENT 'written by readiness probes to prove the database takes writes';

CREATE TABLE IF NOT EXISTS shard_map (
    epoch      BIGINT       NOT NULL COMMENT 'grows by one each time the layout changes',
    layout     MEDIUMTEXT   NOT NULL COMMENT 'which database owns each virtual shard: virtual_shards, then first-last=database ranges',
    adopted_at BIGINT       NOT NULL COMMENT 'Unix ms when the epoch was recorded here',
    PRIMARY KEY (epoch)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4
  COMMENT 'the shard map in force, on every database: feedd refuses a sharding.yaml whose layout differs from the highest epoch';

CREATE TABLE IF NOT EXISTS identity (
    id   TINYINT UNSIGNED NOT NULL COMMENT 'always 0: one row per database',
    name VARCHAR(64)      NOT NULL COMMENT 'the name of this database in the shard map, recorded at its first start',
    PRIMARY KEY (id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4
  COMMENT 'which database of the shard map this is: a dsn pointing at another database, or at an empty one, is refused';

CREATE TABLE IF NOT EXISTS reshard (
    id         TINYINT UNSIGNED NOT NULL COMMENT 'always 0: one reshard at a time',
    layout     MEDIUMTEXT       NOT NULL COMMENT 'the layout the reshard moves the data to (shard_map.layout format)',
    started_at BIGINT           NOT NULL COMMENT 'Unix ms when feedd reshard apply began',
    phase      VARCHAR(32)      NOT NULL DEFAULT '' COMMENT 'on a database that gives up virtual shards: copy, catch-up, verify or cut-over, for feedd reshard status and the metrics',
    copied     BIGINT           NOT NULL DEFAULT 0 COMMENT 'on a database that gives up virtual shards: rows of them copied so far in this run',
    PRIMARY KEY (id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4
  COMMENT 'on every database a reshard touches while it is under way: a second reshard to another layout is refused meanwhile';

CREATE TABLE IF NOT EXISTS layout_fence (
    id      TINYINT UNSIGNED NOT NULL COMMENT 'a stripe, 0 to 63: a fence trigger locks the row of its connection (CONNECTION_ID() % 64)',
    epoch   BIGINT           NOT NULL COMMENT 'the layout epoch this database takes writes under: a write from a connection of an older epoch is refused',
    capture TINYINT          NOT NULL DEFAULT 0 COMMENT '1 while a reshard copies virtual shards away from this database: the fence triggers log each changed row in reshard_changes',
    PRIMARY KEY (id)
) ENGINE = InnoDB
  COMMENT 'locked by the triggers feedd reshard installs on a database that gives up virtual shards; its cut-over locks every row, which holds writes for the pause';

CREATE TABLE IF NOT EXISTS reshard_changes (
    seq        BIGINT UNSIGNED  NOT NULL AUTO_INCREMENT,
    table_name VARCHAR(64)      NOT NULL COMMENT 'the keyed table whose row changed',
    id         BIGINT UNSIGNED  NOT NULL COMMENT 'the row''s placing id (user, author or content id), whose virtual shard says whether it moves',
    pk         VARCHAR(512)     NOT NULL COMMENT 'the row''s primary key as a JSON array',
    PRIMARY KEY (seq)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4
  COMMENT 'rows changed on a database while a reshard copies from it, written by its triggers: feedd reshard applies each to the new database by reading the row again, and deletes the entry';

CREATE TABLE IF NOT EXISTS backdates (
    id  TINYINT UNSIGNED NOT NULL COMMENT 'always 0: one row per database',
    seq BIGINT UNSIGNED  NOT NULL COMMENT 'grows by one with each post published here whose publish_time is older than its publish by more than the store''s backdate margin: the heads that feed reads cache of this database''s outboxes hold only while it stays put',
    PRIMARY KEY (id)
) ENGINE = InnoDB
  COMMENT 'one row per database, bumped in the transaction of every backdated post: the only writes that can add a post to a range of an outbox older than the margin';

CREATE TABLE IF NOT EXISTS streams (
    host_id         BIGINT UNSIGNED NOT NULL,
    stream_id       BIGINT UNSIGNED NOT NULL COMMENT 'shares the content id space: its delivery row reserves it on the shard, content_ids across shards',
    state           TINYINT         NOT NULL DEFAULT 0 COMMENT '0 preview, 1 live, 2 replay',
    scheduled_start BIGINT          NOT NULL COMMENT 'Unix ms the host announced',
    started_at      BIGINT          NULL COMMENT 'Unix ms the stream went live',
    ended_at        BIGINT          NULL COMMENT 'Unix ms the stream ended',
    list            TINYINT         NOT NULL DEFAULT 1 COMMENT 'which of the host''s lists holds the stream: 1 the queue (preview and live), 2 the replays, 0 none (deleted)',
    pos             BIGINT          NOT NULL COMMENT 'order within the list, read descending: -scheduled_start for a preview, started_at live, ended_at for a replay',
    deleted         TINYINT         NOT NULL DEFAULT 0 COMMENT '1 once deleted: the row stays so the id stays taken and DELETE stays idempotent',
    created_at      BIGINT          NOT NULL COMMENT 'Unix ms when the row was written',
    PRIMARY KEY (host_id, stream_id),
    KEY idx_streams_list (host_id, list, pos, stream_id)
) ENGINE = InnoDB
  COMMENT 'author-keyed (by host): each host''s streams. idx_streams_list holds the host''s queue of live and preview streams and its replay list, each read newest first as one index range';

CREATE TABLE IF NOT EXISTS replays (
    user_id   BIGINT UNSIGNED NOT NULL COMMENT 'the viewer',
    ended_at  BIGINT          NOT NULL COMMENT 'the stream''s ended_at',
    stream_id BIGINT UNSIGNED NOT NULL,
    host_id   BIGINT UNSIGNED NOT NULL,
    PRIMARY KEY (user_id, ended_at, stream_id)
) ENGINE = InnoDB
  COMMENT 'user-keyed: the replays fan-out pushed to each viewer, clustered in the order a page reads them; trimmed to the inbox limit, complete at and above the viewer''s replay_floors row';

CREATE TABLE IF NOT EXISTS replay_floors (
    user_id    BIGINT UNSIGNED NOT NULL,
    floor_time BIGINT          NOT NULL COMMENT 'ended_at of the floor: the viewer''s replays list is complete at and above (floor_time, floor_id)',
    floor_id   BIGINT UNSIGNED NOT NULL COMMENT 'stream_id of the floor',
    PRIMARY KEY (user_id)
) ENGINE = InnoDB
  COMMENT 'user-keyed: one row per viewer whose replays list was trimmed or backfilled short; also the lock that trims and backfills of the list take first';

CREATE TABLE IF NOT EXISTS live_sessions (
    user_id    BIGINT UNSIGNED NOT NULL COMMENT 'the viewer',
    session_id BIGINT UNSIGNED NOT NULL COMMENT 'random, named by the client on later pages',
    expires_at BIGINT          NOT NULL COMMENT 'Unix ms after which the session is gone (410) and clean-up may delete the row',
    snapshot   MEDIUMBLOB      NOT NULL COMMENT 'the live and preview streams of the followed hosts at the first page, in feed order: 33-byte records (stream_id, host_id, state, scheduled_start, started_at)',
    PRIMARY KEY (user_id, session_id),
    KEY idx_live_sessions_expiry (expires_at)
) ENGINE = InnoDB
  COMMENT 'user-keyed: one row per live-feed session; each new session deletes a few expired ones';

INSERT IGNORE INTO backdates (id, seq) VALUES (0, 0);

-- +goose Down
DROP TABLE IF EXISTS live_sessions;
DROP TABLE IF EXISTS replay_floors;
DROP TABLE IF EXISTS replays;
DROP TABLE IF EXISTS streams;
DROP TABLE IF EXISTS backdates;
DROP TABLE IF EXISTS reshard_changes;
DROP TABLE IF EXISTS layout_fence;
DROP TABLE IF EXISTS reshard;
DROP TABLE IF EXISTS identity;
DROP TABLE IF EXISTS shard_map;
DROP TABLE IF EXISTS health;
DROP TABLE IF EXISTS content_ids;
DROP TABLE IF EXISTS markers;
DROP TABLE IF EXISTS hidden_from;
DROP TABLE IF EXISTS mutes;
DROP TABLE IF EXISTS follow_events;
DROP TABLE IF EXISTS following;
DROP TABLE IF EXISTS inbox;
DROP TABLE IF EXISTS authors;
DROP TABLE IF EXISTS followers;
DROP TABLE IF EXISTS fanout_tasks;
DROP TABLE IF EXISTS deliveries;
DROP TABLE IF EXISTS posts;
