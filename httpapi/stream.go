package httpapi

import (
	"bufio"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/service"
)

// streamRoute is the feed stream's route template. It is exempt from the
// request deadline (each of its reads has one instead), and it alone takes
// the token as ?access_token=, since browsers' EventSource cannot set
// headers.
const streamRoute = "/v1/users/:id/feed/stream"

// streamRetryMillis is the reconnection delay the stream asks clients for.
const streamRetryMillis = 1000

// streamFeed serves the feed as Server-Sent Events: the items newer than
// Last-Event-ID (or ?since=), oldest first, then new ones as they enter the
// feed, each event's id its position. The response starts once the stream
// is admitted (a stream past a cap is a JSON error); the server's
// connection deadlines are lifted for it, and each write gets writeTimeout
// of its own.
func (a *api) streamFeed(c echo.Context) error {
	user, err := pathID(c, "id")
	if err != nil {
		return err
	}
	since := c.QueryParam("since")
	if id := c.Request().Header.Get("Last-Event-ID"); id != "" {
		since = id // a reconnecting EventSource sends both: the last event wins
	}
	if err := service.CheckPosition(since); err != nil {
		return err
	}
	res := c.Response()
	if c.Request().Method == http.MethodHead {
		setStreamHeaders(res.Header())
		return c.NoContent(http.StatusOK)
	}
	rc := http.NewResponseController(res.Writer)
	sink := &sseSink{res: res, rc: rc, w: bufio.NewWriter(res), timeout: a.writeTimeout}
	err = a.svc.StreamFeed(c.Request().Context(), user, since, a.readTimeout, sink)
	if !res.Committed {
		return err // refused before the stream started
	}
	if err != nil && c.Request().Context().Err() == nil {
		a.log.Debug("http: stream ended", "user_id", user, "error", err)
	}
	return nil
}

// setStreamHeaders sets the headers of a stream's response.
func setStreamHeaders(h http.Header) {
	h.Set(echo.HeaderContentType, "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // nginx: pass events through at once
}

// sseSink writes events to one stream's connection, flushing each, under a
// write deadline per write.
type sseSink struct {
	res     *echo.Response
	rc      *http.ResponseController
	w       *bufio.Writer
	timeout time.Duration
	buf     []byte
}

// Start answers 200 with the stream's headers and the reconnection delay,
// and lifts the connection's read deadline.
func (s *sseSink) Start() error {
	setStreamHeaders(s.res.Header())
	_ = s.rc.SetReadDeadline(time.Time{})
	s.res.WriteHeader(http.StatusOK)
	return s.write(func(w *bufio.Writer) {
		w.WriteString("retry: ")
		w.WriteString(strconv.Itoa(streamRetryMillis))
		w.WriteString("\n\n")
	})
}

func (s *sseSink) write(fill func(*bufio.Writer)) error {
	if err := s.rc.SetWriteDeadline(time.Now().Add(s.timeout)); err != nil {
		return err
	}
	fill(s.w)
	if err := s.w.Flush(); err != nil {
		return err
	}
	return s.rc.Flush()
}

// Item writes one event: the position as its id, the post as its data.
func (s *sseSink) Item(p feed.Post, position string) error {
	return s.write(func(w *bufio.Writer) {
		w.WriteString("id: ")
		w.WriteString(position)
		w.WriteString("\nevent: item\ndata: ")
		s.buf = appendPost(s.buf[:0], p)
		w.Write(s.buf)
		w.WriteString("\n\n")
	})
}

// Keepalive writes a comment line, which clients ignore.
func (s *sseSink) Keepalive() error {
	return s.write(func(w *bufio.Writer) { w.WriteString(": keepalive\n\n") })
}
