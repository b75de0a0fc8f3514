package store

import "context"

// The SQL the EXPLAIN test (package store_test) checks. Exported here, in a
// test file, so the test can use storetest, which imports this package.
const (
	FeedPageSQL      = feedPageSQL
	FeedPagePullSQL  = feedPagePullSQL
	HeaderKeySQL     = headerKeySQL
	ListPostsSQL     = listPostsSQL
	PullPartSQL      = pullPartSQL
	FollowersPageSQL = followersPageSQL
	PushSQL          = pushSQL
	PushActiveSQL    = pushActiveSQL
	RetractSQL       = retractSQL
	ListFollowingSQL = listFollowingSQL
	TrimBoundarySQL  = trimBoundaryPartSQL
	TrimPartSQL      = trimPartSQL
	InboxTopSQL      = inboxTopPartSQL
)

// NextTaskSQL is the query a worker's first batch claims a task with.
var NextTaskSQL = nextTaskSQL(0)

// Retryable says whether the store runs a transaction again after err.
var Retryable = retryable

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
