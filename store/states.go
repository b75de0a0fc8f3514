package store

// The codes of the state and mode columns. SQL text is constant, and a
// constant cannot format a number, so each code has a twin spelling it for
// SQL (…SQL); TestStateCodes keeps each pair equal.

// Delivery states (deliveries.state).
const (
	deliveryPending = 0 // to plan
	deliveryRunning = 1 // planned, tasks under way
	deliveryDone    = 2
	// deliveryParked is the state of a stream's delivery row until the
	// stream ends: no planner claims it (they claim deliveryPending), and
	// the row reserves the stream's id among the content ids of the shard.
	deliveryParked = 3

	deliveryPendingSQL = "0"
	deliveryRunningSQL = "1"
	deliveryDoneSQL    = "2"
	deliveryParkedSQL  = "3"
)

// Delivery modes (deliveries.mode, fanout_tasks.mode).
const (
	ModePush       = 0 // every follower
	ModePushActive = 1 // followers active recently; the others pull
	ModePull       = 2 // nobody: every follower pulls

	modePushSQL = "0"
)

// Author modes (authors.mode).
const (
	AuthorPush      = 0
	AuthorSwitching = 1
	AuthorPull      = 2

	authorPushSQL      = "0"
	authorSwitchingSQL = "1"
)

// Stream states (streams.state) and the host's lists that hold them
// (streams.list): the queue holds previews and live streams, ordered by
// pos descending (-scheduled_start for a preview, started_at once live, so
// live streams come first, newest start first, then previews, earliest
// first); the replay list holds ended streams by ended_at.
const (
	streamPreview = 0
	streamLive    = 1
	streamReplay  = 2

	listNone    = 0
	listQueue   = 1
	listReplays = 2

	streamPreviewSQL = "0"
	streamLiveSQL    = "1"
	streamReplaySQL  = "2"
	listNoneSQL      = "0"
	listQueueSQL     = "1"
	listReplaysSQL   = "2"
)

// Move states (moves.state) and the parts a move runs through in order
// (moves.phase): the old id's own mutes rows, then its follows (a muted
// author's follow moves with its mute, so the new edge is created muted),
// its marker, then the readers it hides from and its followers, whose rows
// live on their own databases.
const (
	movePending = 0 // not claimed yet
	moveRunning = 1
	moveDone    = 2

	movePendingSQL = "0"
	moveRunningSQL = "1"
	moveDoneSQL    = "2"

	movePhaseMutes     = 0
	movePhaseFollows   = 1
	movePhaseMarker    = 2
	movePhaseHides     = 3
	movePhaseFollowers = 4
)

// ClaimableRows says which rows of a table workers may claim: those whose
// column Col holds one of Values (Col empty: every row), as the predicate
// SQL says in SQL. A reshard moves them at the cut-over, not with the copy.
type ClaimableRows struct {
	Col    string
	Values []string
	SQL    string
}

// Claimable is ClaimableRows for each table whose rows workers claim.
var Claimable = map[string]ClaimableRows{
	"fanout_tasks":  {SQL: "1 = 1"},
	"follow_events": {SQL: "1 = 1"},
	"deliveries":    {Col: "state", Values: []string{deliveryPendingSQL, deliveryRunningSQL}, SQL: "state < " + deliveryDoneSQL},
	"authors":       {Col: "mode", Values: []string{authorSwitchingSQL}, SQL: "mode = " + authorSwitchingSQL},
	"moves":         {Col: "state", Values: []string{movePendingSQL, moveRunningSQL}, SQL: "state < " + moveDoneSQL},
}
