package feed

// Move states, as the progress of an account move reports them.
const (
	MovePending = "pending" // accepted, no worker has taken it up yet
	MoveRunning = "running"
	MoveDone    = "done"
)

// Move is an account move and its progress: the old id's follows, mutes,
// read marker, hides and followers going to the new id, part by part.
type Move struct {
	From, To  uint64
	State     string // MovePending, MoveRunning or MoveDone
	Follows   MoveCount
	Mutes     MoveCount
	Hides     MoveCount
	Marker    MoveCount
	Followers MoveCount
	CreatedAt int64 // Unix ms of the request
	UpdatedAt int64 // Unix ms of the last progress
}

// MoveCount is one part of a move: items moved so far, items left with the
// old id because the new id was at a cap, and the items known, which is the
// count when the move started or more if the move met more since.
type MoveCount struct {
	Moved   int64
	Skipped int64
	Total   int64
}
