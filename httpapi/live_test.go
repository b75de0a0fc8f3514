package httpapi_test

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/feedhq/feed/internal/wait"
)

type stream struct {
	StreamID       string `json:"stream_id"`
	HostID         string `json:"host_id"`
	State          string `json:"state"`
	ScheduledStart int64  `json:"scheduled_start"`
	StartedAt      *int64 `json:"started_at"`
	EndedAt        *int64 `json:"ended_at"`
}

type livePage struct {
	Items      []stream `json:"items"`
	Session    string   `json:"session"`
	NextCursor *string  `json:"next_cursor"`
}

// TestLiveRoutes drives the live-stream routes over HTTP, every answer
// checked against openapi.json: a stream's life (create, repeat, start,
// end, delete) with its 409s, the live feed's first page and a later one
// in its session, and the 400s and 410 of bad input.
func TestLiveRoutes(t *testing.T) {
	t.Parallel()
	v := setup(t, envOpts{workers: true})
	viewer, host := v.id(), v.id()
	wantStatus(t, v.do(t, http.MethodPut, "/v1/users/"+u(viewer)+"/following/"+u(host), ""), http.StatusNoContent)
	base := "/v1/users/" + u(host) + "/streams"
	soon := time.Now().Add(time.Hour).UnixMilli()

	var ids []string
	for i := range 3 {
		body := `{"stream_id":"` + strconv.Itoa(700+i) + `","scheduled_start":` + strconv.FormatInt(soon+int64(i), 10) + `}`
		r := v.do(t, http.MethodPost, base, body)
		wantStatus(t, r, http.StatusCreated)
		var st stream
		r.decode(t, &st)
		if st.State != "preview" || st.HostID != u(host) || st.StartedAt != nil {
			t.Fatalf("created stream = %+v", st)
		}
		ids = append(ids, st.StreamID)
		if i == 0 {
			wantStatus(t, v.do(t, http.MethodPost, base, body), http.StatusOK)
			wantError(t, v.do(t, http.MethodPost, base, `{"stream_id":"700","scheduled_start":1}`), http.StatusConflict, "conflict")
		}
	}
	wantError(t, v.do(t, http.MethodPost, base+"/"+ids[0]+"/end", ""), http.StatusConflict, "conflict")
	r := v.do(t, http.MethodPost, base+"/"+ids[0]+"/start", "")
	wantStatus(t, r, http.StatusOK)
	var live stream
	r.decode(t, &live)
	if live.State != "live" || live.StartedAt == nil {
		t.Fatalf("started stream = %+v", live)
	}
	wantError(t, v.do(t, http.MethodPost, base+"/"+ids[0]+"/start", ""), http.StatusConflict, "conflict")

	// Live first, then previews by scheduled start; the session pins them.
	feed := "/v1/users/" + u(viewer) + "/live"
	r = v.do(t, http.MethodGet, feed+"?limit=2", "")
	wantStatus(t, r, http.StatusOK)
	var first livePage
	r.decode(t, &first)
	if got := streamIDs(first.Items); !slices.Equal(got, ids[:2]) || first.Session == "" || first.NextCursor == nil {
		t.Fatalf("first live page = %v (session %q, next %v), want %v", got, first.Session, first.NextCursor, ids[:2])
	}
	wantStatus(t, v.do(t, http.MethodPost, base+"/"+ids[0]+"/end", ""), http.StatusOK)
	wantStatus(t, v.do(t, http.MethodDelete, base+"/"+ids[2], ""), http.StatusNoContent)
	wantStatus(t, v.do(t, http.MethodDelete, base+"/"+ids[2], ""), http.StatusNoContent)
	wantError(t, v.do(t, http.MethodGet, base+"/"+ids[2], ""), http.StatusNotFound, "not_found")
	r = v.do(t, http.MethodGet, feed+"?limit=2&session="+url.QueryEscape(first.Session)+"&cursor="+url.QueryEscape(*first.NextCursor), "")
	wantStatus(t, r, http.StatusOK)
	var next livePage
	r.decode(t, &next)
	// The deleted preview leaves the session's later pages; the ended
	// stream was in the snapshot, so it does not come back as a replay.
	if got := streamIDs(next.Items); len(got) != 0 || next.NextCursor != nil {
		t.Fatalf("later live page = %v (next %v), want none", got, next.NextCursor)
	}
	// A new session sees the replay once its fan-out ran.
	var fresh livePage
	wait.For(t, "the replay in a new session", func() error {
		r := v.do(t, http.MethodGet, feed+"?limit=5", "")
		wantStatus(t, r, http.StatusOK)
		r.decode(t, &fresh)
		if !slices.Equal(streamIDs(fresh.Items), []string{ids[1], ids[0]}) || fresh.Items[1].State != "replay" {
			return fmt.Errorf("live page %+v", fresh.Items)
		}
		return nil
	})

	for _, tt := range []struct {
		method, target, body string
		status               int
		code                 string
	}{
		{http.MethodPost, base, `{"scheduled_start":-5}`, http.StatusBadRequest, "invalid_argument"},
		{http.MethodPost, base, `{"stream_id":"x","scheduled_start":1}`, http.StatusBadRequest, "invalid_argument"},
		{http.MethodPost, base + "/" + ids[1] + "/start", `{"started_at":"soon"}`, http.StatusBadRequest, "invalid_argument"},
		{http.MethodGet, feed + "?limit=0", "", http.StatusBadRequest, "invalid_argument"},
		{http.MethodGet, feed + "?limit=2&cursor=" + url.QueryEscape(*first.NextCursor), "", http.StatusBadRequest, "invalid_argument"},
		{http.MethodGet, feed + "?limit=2&session=12345&cursor=" + url.QueryEscape(*first.NextCursor), "", http.StatusGone, "session_expired"},
		{http.MethodPost, "/v1/users/" + u(host) + "/streams/999999/start", "", http.StatusNotFound, "not_found"},
	} {
		wantError(t, v.do(t, tt.method, tt.target, tt.body), tt.status, tt.code)
	}
}

func streamIDs(items []stream) []string {
	return ids(items, func(s stream) string { return s.StreamID })
}
