package store

// The SQL the EXPLAIN test (package store_test) checks. Exported here, in a
// test file, so the test can use storetest, which imports this package.
const (
	FeedPageSQL      = feedPageSQL
	FeedPagePullSQL  = feedPagePullSQL
	HeaderKeySQL     = headerKeySQL
	ListPostsSQL     = listPostsSQL
	PullPartSQL      = pullPartSQL
	FollowersPageSQL = followersPageSQL
	ListFollowingSQL = listFollowingSQL
	TrimBoundarySQL  = trimBoundaryPartSQL
	TrimPartSQL      = trimPartSQL
)

// ClaimUpdateSQL is the UPDATE that takes n claim candidates of table.
func ClaimUpdateSQL(table string, n int) string {
	for _, t := range []claimTable{deliveryClaims, taskClaims, followEventClaims, switchClaims} {
		if t.table == table {
			return claimUpdateSQL(t, n)
		}
	}
	panic("no claim table " + table)
}
