package httpapi

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/feedhq/feed"
)

// exportRoute is the route of a user's export. It is exempt from the
// request deadline, since a user's records may take longer to send than
// one read may take: each page's read gets the read deadline, each write
// the write deadline.
const exportRoute = "/v1/users/:id/export"

// exportUser streams the user's records as JSON Lines, a page at a time,
// flushing each. An error before the first line is answered as usual; one
// after it aborts the response, so that the client cannot take a cut-short
// export for a whole one.
func (a *api) exportUser(c echo.Context) error {
	user, err := pathID(c, "id")
	if err != nil {
		return err
	}
	res := c.Response()
	// Set when the answer is records, not before: an error's body is JSON.
	ndjson := func() { res.Header().Set(echo.HeaderContentType, "application/x-ndjson") }
	if c.Request().Method == http.MethodHead {
		ndjson()
		return c.NoContent(http.StatusOK)
	}
	rc := http.NewResponseController(res.Writer)
	_ = rc.SetReadDeadline(time.Time{})
	var buf []byte
	err = a.svc.ExportUser(c.Request().Context(), user, a.readTimeout, func(recs []feed.Record) error {
		buf = buf[:0]
		for _, r := range recs {
			buf = append(r.AppendJSON(buf), '\n')
		}
		if err := rc.SetWriteDeadline(time.Now().Add(a.writeTimeout)); err != nil {
			return err
		}
		if !res.Committed {
			ndjson()
			res.WriteHeader(http.StatusOK)
		}
		if _, err := res.Write(buf); err != nil {
			return err
		}
		return rc.Flush()
	})
	switch {
	case err == nil && !res.Committed:
		ndjson()
		return c.NoContent(http.StatusOK)
	case err != nil && res.Committed:
		if c.Request().Context().Err() == nil {
			a.log.Warn("http: export cut short", "user_id", user, "error", err)
		}
		panic(http.ErrAbortHandler)
	}
	return err
}
