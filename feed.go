// Package feed holds the domain types of the timeline service: posts, follows,
// feed pages and delivery status. It imports only the standard library so
// every layer (store, service, httpapi) can share it.
package feed

// KindPost is the kind a post gets when the publisher names none.
const KindPost = "post"

// Post is one item of an author's outbox and of the feeds it reaches.
// ContentID is unique in the whole service; PublishTime is Unix milliseconds.
type Post struct {
	ContentID   uint64 `db:"content_id"`
	AuthorID    uint64 `db:"author_id"`
	PublishTime int64  `db:"publish_time"`
	Kind        string `db:"kind"`
}

// Key is the post's position in every newest-first list.
func (p Post) Key() Key { return Key{PublishTime: p.PublishTime, ContentID: p.ContentID} }

// Key orders posts newest first: publish_time descending, then content_id
// descending. It is what keyset cursors carry.
type Key struct {
	PublishTime int64
	ContentID   uint64
}

// Less reports whether k sorts after o in a newest-first list, i.e. k is older.
func (k Key) Less(o Key) bool {
	if k.PublishTime != o.PublishTime {
		return k.PublishTime < o.PublishTime
	}
	return k.ContentID < o.ContentID
}

// NewestFirst orders posts as every feed lists them, for slices.SortFunc:
// the newer publish_time first, then the higher content id.
func NewestFirst(a, b Post) int {
	switch ka, kb := a.Key(), b.Key(); {
	case kb.Less(ka):
		return -1
	case ka.Less(kb):
		return 1
	}
	return 0
}

// Follow is one edge of the social graph as the lists show it.
type Follow struct {
	UserID     uint64 `db:"user_id"`
	AuthorID   uint64 `db:"author_id"`
	FollowedAt int64  `db:"followed_at"`
}

// FollowRequest asks for a follow. CopyLimit, when set, is how many of the
// author's posts published before the follow the follow brings into the
// feed (0 to the inbox limit); nil brings the author's whole history.
type FollowRequest struct {
	UserID, AuthorID uint64
	CopyLimit        *int
}

// FollowResult is what became of one FollowRequest of a batch: Created, or
// not because the user already followed the author (Err nil), or Err.
type FollowResult struct {
	Created bool
	Err     error
}

// Mute is a pair of a mute (the user mutes the author) or a hide (the
// author hides from the user), with when it began.
type Mute struct {
	UserID   uint64 `db:"user_id"`
	AuthorID uint64 `db:"author_id"`
	At       int64  `db:"at"`
}

// Page asks for up to Limit items strictly after the cursor's position.
// Since, for the home feed only, also bounds it above: only items strictly
// newer than that position ("" for none).
type Page struct {
	Limit  int
	Cursor string
	Since  string
	// Kinds, for the home feed only, keeps only posts of these kinds (none:
	// every kind).
	Kinds []string
}

// FeedPage is a page of a home feed. Next is the position of the last item
// ("" when the feed ends, or nothing is left above the page's since), Top
// that of the first ("" on an empty page). MissingAuthors lists, sorted, the followed
// authors whose outboxes could not be read because their database did not
// answer: the page is what the other sources give, and their posts above
// Next are not returned later in the same walk. It is empty when every
// source answered.
type FeedPage struct {
	Items          []Post
	Next           string
	Top            string
	MissingAuthors []uint64
}

// Page limits from the contract.
const (
	DefaultPageLimit = 20
	MaxPageLimit     = 100
	MaxKinds         = 10 // kinds one feed filter names
)

// Delivery states and modes reported by the delivery endpoint.
const (
	DeliveryPending = "pending"
	DeliveryRunning = "running"
	DeliveryDone    = "done"

	ModePush       = "push"
	ModePushActive = "push_active"
	ModePull       = "pull"
)

// Delivery is the fan-out progress of one post.
type Delivery struct {
	State      string
	Mode       string
	Recipients int64
	Delivered  int64
	// PendingDatabases names the databases whose followers still wait for
	// the post because the database is not up.
	PendingDatabases []string
}

// UnreadCap bounds an unread count: past it a count reports the cap and
// Capped, so a count never costs more than reading that many items.
const UnreadCap = 1000

// Marker is a user's read marker and the items the feed holds above it.
// Cursor is the marked position ("" when the user never set one: every item
// is unread); UpdatedAt is when it last moved (Unix ms, 0 with no marker).
type Marker struct {
	Cursor    string
	UpdatedAt int64
	Unread    int
	Capped    bool
}
