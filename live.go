package feed

// Stream states: a host schedules a stream (preview), starts it (live) and
// ends it (replay).
const (
	StreamPreview = "preview"
	StreamLive    = "live"
	StreamReplay  = "replay"
)

// Stream is a host's live stream. StartedAt and EndedAt are nil until the
// stream starts and ends; times are Unix ms.
type Stream struct {
	StreamID       uint64
	HostID         uint64
	State          string
	ScheduledStart int64
	StartedAt      *int64
	EndedAt        *int64
}

// LivePage is a page of a viewer's live feed: live streams, then previews,
// then replays. Session names the snapshot later pages read.
type LivePage struct {
	Items   []Stream
	Session string
	Next    string
}
