package store

import (
	"context"
	"sync"

	"github.com/jmoiron/sqlx"

	"github.com/feedhq/feed"
)

// A page below the inbox merges the outboxes of everyone the user follows,
// so it starts from the followee list: thousands of rows for a heavy
// reader, each page of a scroll again, where the list rarely changes. The
// user's header row carries a version of the list (follows), moved by
// every transaction that changes which authors the user reads (a follow,
// an unfollow, a mute or hide set or lifted), and each process keeps the
// lists it read by that version. A page that read the version in its
// snapshot uses the list cached under it; a list read later than its
// version is at worst newer than the page's snapshot, as if the page had
// been read a moment later.

// followsChangedSQL moves the user's followee-list version; the caller
// holds the header row.
const followsChangedSQL = `UPDATE inbox SET follows = COALESCE(follows, 0) + 1 WHERE user_id = ? AND ` + headerKeySQL

// followsChanged moves the version in tx.
func followsChanged(ctx context.Context, tx *sqlx.Tx, userID uint64) error {
	_, err := tx.ExecContext(ctx, followsChangedSQL, userID)
	return err
}

// followeeCacheIDs bounds the author ids the process keeps in cached
// followee lists (8 bytes each).
const followeeCacheIDs = 1 << 22

// followeeCache holds followee lists by user, each with the version it was
// read under. The lists are shared: callers must not change them.
type followeeCache struct {
	stripes [64]struct {
		mu  sync.Mutex
		ids int // author ids held by the stripe's lists
		m   map[uint64]followees
	}
}

type followees struct {
	version int64
	authors []uint64
	from    map[uint64]feed.Key // history bounds, FollowedAuthors' from
}

func (c *followeeCache) stripe(userID uint64) *struct {
	mu  sync.Mutex
	ids int
	m   map[uint64]followees
} {
	return &c.stripes[(userID*0x9E3779B97F4A7C15)>>58]
}

// get returns the user's list of the version, if held.
func (c *followeeCache) get(userID uint64, version int64) (followees, bool) {
	st := c.stripe(userID)
	st.mu.Lock()
	defer st.mu.Unlock()
	e, ok := st.m[userID]
	if !ok || e.version != version {
		return followees{}, false
	}
	return e, true
}

// put keeps the user's list under the version, dropping other lists of
// the stripe (which ones does not matter) while it holds too many ids.
func (c *followeeCache) put(userID uint64, version int64, e followees) {
	e.version = version
	authors := e.authors
	st := c.stripe(userID)
	st.mu.Lock()
	defer st.mu.Unlock()
	limit := followeeCacheIDs / len(c.stripes)
	if len(authors) > limit {
		return
	}
	if st.m == nil {
		st.m = map[uint64]followees{}
	}
	if old, ok := st.m[userID]; ok {
		delete(st.m, userID)
		st.ids -= len(old.authors)
	}
	for u, e := range st.m {
		if st.ids+len(authors) <= limit {
			break
		}
		delete(st.m, u)
		st.ids -= len(e.authors)
	}
	st.m[userID] = e
	st.ids += len(authors)
}
