package store

import (
	"strconv"
	"testing"
)

// TestStateCodes checks that each code's SQL spelling is its number.
func TestStateCodes(t *testing.T) {
	for _, c := range []struct {
		name string
		code int
		sql  string
	}{
		{"deliveryPending", deliveryPending, deliveryPendingSQL},
		{"deliveryRunning", deliveryRunning, deliveryRunningSQL},
		{"deliveryDone", deliveryDone, deliveryDoneSQL},
		{"PullBelowActive", PullBelowActive, pullBelowActiveSQL},
		{"deliveryParked", deliveryParked, deliveryParkedSQL},
		{"ModePush", ModePush, modePushSQL},
		{"AuthorPush", AuthorPush, authorPushSQL},
		{"AuthorSwitching", AuthorSwitching, authorSwitchingSQL},
		{"streamPreview", streamPreview, streamPreviewSQL},
		{"streamLive", streamLive, streamLiveSQL},
		{"streamReplay", streamReplay, streamReplaySQL},
		{"listNone", listNone, listNoneSQL},
		{"listQueue", listQueue, listQueueSQL},
		{"listReplays", listReplays, listReplaysSQL},
		{"movePending", movePending, movePendingSQL},
		{"moveRunning", moveRunning, moveRunningSQL},
		{"moveDone", moveDone, moveDoneSQL},
	} {
		if got := strconv.Itoa(c.code); got != c.sql {
			t.Errorf("%s is %s, its SQL spelling %s", c.name, got, c.sql)
		}
	}
}
