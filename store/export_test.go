package store

import (
	"context"

	"github.com/jmoiron/sqlx"
)

// The SQL the EXPLAIN test (package store_test) checks. Exported here, in a
// test file, so the test can use storetest, which imports this package.
const (
	FeedPageSQL         = feedPageSQL
	FeedPagePullSQL     = feedPagePullSQL
	FeedFirstPageSQL    = feedFirstPageSQL
	FeedFirstPullSQL    = feedFirstPagePullSQL
	FeedNextPageSQL     = feedNextPageSQL
	FeedNextPullSQL     = feedNextPagePullSQL
	FeedSincePageSQL    = feedSincePageSQL
	FeedSincePullSQL    = feedSincePagePullSQL
	PageSince           = pageSince
	PageFirst           = pageFirst
	PageNext            = pageNext
	PageAll             = pageAll
	PageKind            = pageKind
	FeedPageKinds       = feedPageKindsSQL
	FeedPagePullKind    = feedPagePullKindsSQL
	PullPartKindSQL     = pullPartKindSQL
	PullKindHeads       = pullKindHeadsSQL
	PullKindWindow      = pullKindWindowSQL
	PullKindWindowHeads = pullKindWindowHeadsSQL
	HeaderKeySQL        = headerKeySQL
	ListPostsSQL        = listPostsSQL
	PullPartSQL         = pullPartSQL
	PullHeadsSQL        = pullHeadsSQL
	PullWindowSQL       = pullWindowSQL
	PullWindowHeads     = pullWindowHeadsSQL
	FollowersPageSQL    = followersPageSQL
	PushSQL             = pushSQL
	PushActiveSQL       = pushActiveSQL
	RetractSQL          = retractSQL
	RetractKeptSQL      = retractKeptSQL
	ListFollowingSQL    = listFollowingSQL
	FollowedAuthors     = followedAuthorsSQL
	FollowedHosts       = followedHostsSQL
	TrimBoundarySQL     = trimBoundaryPartSQL
	TrimPartSQL         = trimPartSQL
	InboxTopSQL         = inboxTopPartSQL
)

// NextTaskSQL is the query a worker's first batch claims a task with.
var NextTaskSQL = nextTaskSQL(0)

// ClaimUpdateSQL is the UPDATE that takes n claim candidates of table.
func ClaimUpdateSQL(table string, n int) string {
	for _, t := range []claimTable{deliveryClaims, taskClaims, followEventClaims, switchClaims} {
		if t.table == table {
			return claimUpdateSQL(t, n)
		}
	}
	panic("no claim table " + table)
}

// ClaimTasks leases up to limit unfinished fan-out tasks of the shard to
// token without running a batch, as RunNextTask leaves a task its first
// batch did not finish: tests drive such tasks batch by batch.
func (s *Store) ClaimTasks(ctx context.Context, sh *Shard, now, leaseUntil int64, limit int, token uint64) ([]Task, error) {
	return claim[Task](ctx, s, sh, taskClaims, now, leaseUntil, limit, token)
}

func (j *Task) setToken(token uint64) { j.Token = token }

func (j *Task) placingID() uint64 { return j.AuthorID }

// PinEpoch pins ctx to the store's epoch, as each write method does first.
func (s *Store) PinEpoch(ctx context.Context) context.Context { return s.pin(ctx) }

// WriteEpoch is the epoch a transaction on sh in ctx writes under: what
// the layout fence's triggers compare.
func WriteEpoch(ctx context.Context, sh *Shard) (int64, error) {
	var e int64
	err := sh.inTx(ctx, func(tx *sqlx.Tx) error { return tx.GetContext(ctx, &e, "SELECT @feed_epoch") })
	return e, err
}

// InTx runs fn as a store method runs its transaction on sh, with its
// retries and its error as the method returns it.
func InTx(ctx context.Context, sh *Shard, fn func(tx *sqlx.Tx) error) error {
	return wrap("test", sh.inTx(ctx, fn))
}

// Classify is classify: a database error as the store's methods return it.
func Classify(err error) error { return classify(err) }

// TxAttempts is how many times InTx runs a conflicting transaction.
const TxAttempts = txAttempts

// OnTarget runs fn in the transaction a fan-out write to another database
// than the author's runs in.
func (s *Store) OnTarget(ctx context.Context, target *Shard, fn func(ctx context.Context, tx *sqlx.Tx) (int64, error)) (int64, error) {
	return s.onTarget(ctx, target, BatchOptions{}, fn)
}

// PageStmtOf exposes pageStmtOf.
var PageStmtOf = pageStmtOf
