package httpapi

import (
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/service"
)

// streamJSON is a stream on the wire: ids as decimal strings, times in Unix
// ms or null.
type streamJSON struct {
	StreamID       string `json:"stream_id"`
	HostID         string `json:"host_id"`
	State          string `json:"state"`
	ScheduledStart int64  `json:"scheduled_start"`
	StartedAt      *int64 `json:"started_at"`
	EndedAt        *int64 `json:"ended_at"`
}

func toStreamJSON(st feed.Stream) streamJSON {
	return streamJSON{
		StreamID:       strconv.FormatUint(st.StreamID, 10),
		HostID:         strconv.FormatUint(st.HostID, 10),
		State:          st.State,
		ScheduledStart: st.ScheduledStart,
		StartedAt:      st.StartedAt,
		EndedAt:        st.EndedAt,
	}
}

// livePageJSON is a page of the live feed.
type livePageJSON struct {
	Items      []streamJSON `json:"items"`
	Session    string       `json:"session"`
	NextCursor *string      `json:"next_cursor"`
}

// createStreamBody is the request that schedules a stream.
type createStreamBody struct {
	StreamID       *jsonID `json:"stream_id"`
	ScheduledStart *int64  `json:"scheduled_start"`
}

func (a *api) createStream(c echo.Context) error {
	host, err := pathID(c, "id")
	if err != nil {
		return err
	}
	var body createStreamBody
	if err := decodeBody(c, &body); err != nil {
		return err
	}
	in := service.StreamInput{HostID: host, ScheduledStart: body.ScheduledStart}
	if body.StreamID != nil {
		in.StreamID = uint64(*body.StreamID)
	}
	st, created, err := a.svc.CreateStream(c.Request().Context(), in)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	return c.JSON(status, toStreamJSON(st))
}

// startStreamBody and endStreamBody carry a transition's time, now when
// absent.
type startStreamBody struct {
	StartedAt *int64 `json:"started_at"`
}

type endStreamBody struct {
	EndedAt *int64 `json:"ended_at"`
}

func (a *api) startStream(c echo.Context) error {
	var body startStreamBody
	return a.moveStream(c, &body, func(host, stream uint64) (feed.Stream, error) {
		return a.svc.StartStream(c.Request().Context(), host, stream, body.StartedAt)
	})
}

func (a *api) endStream(c echo.Context) error {
	var body endStreamBody
	return a.moveStream(c, &body, func(host, stream uint64) (feed.Stream, error) {
		return a.svc.EndStream(c.Request().Context(), host, stream, body.EndedAt)
	})
}

// moveStream parses a transition's path and body and answers with the
// stream move returns.
func (a *api) moveStream(c echo.Context, body any, move func(host, stream uint64) (feed.Stream, error)) error {
	host, stream, err := pathIDs(c, "id", "stream_id")
	if err != nil {
		return err
	}
	if err := decodeBody(c, body); err != nil {
		return err
	}
	st, err := move(host, stream)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toStreamJSON(st))
}

func (a *api) deleteStream(c echo.Context) error {
	host, stream, err := pathIDs(c, "id", "stream_id")
	if err != nil {
		return err
	}
	if err := a.svc.DeleteStream(c.Request().Context(), host, stream); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

func (a *api) getStream(c echo.Context) error {
	host, stream, err := pathIDs(c, "id", "stream_id")
	if err != nil {
		return err
	}
	st, err := a.svc.GetStream(c.Request().Context(), host, stream)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toStreamJSON(st))
}

func (a *api) getLive(c echo.Context) error {
	viewer, err := pathID(c, "id")
	if err != nil {
		return err
	}
	page, err := parsePage(c)
	if err != nil {
		return err
	}
	lp, err := a.svc.LivePage(c.Request().Context(), viewer, page, c.QueryParam("session"))
	if err != nil {
		return err
	}
	out := livePageJSON{Items: make([]streamJSON, len(lp.Items)), Session: lp.Session}
	for i, st := range lp.Items {
		out.Items[i] = toStreamJSON(st)
	}
	if lp.Next != "" {
		out.NextCursor = &lp.Next
	}
	return c.JSON(http.StatusOK, out)
}
