package httpapi

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/feedhq/feed"
)

// Request deadlines. A feed page is one statement (about a millisecond at
// rest) and a write one short transaction, so a request that takes seconds
// is waiting for a database that does not answer; the client is better
// served by a 503 it can retry elsewhere than by a hang.
const (
	ReadDeadlineDefault  = 2 * time.Second
	WriteDeadlineDefault = 3 * time.Second
)

// MaxBodyBytes bounds a request body; larger ones get 413.
const MaxBodyBytes = 64 << 10

// MaxBatchBodyBytes bounds the body of a batch of follows (followsRoute),
// which holds up to 1,000 pairs of 20-digit ids with their options.
const MaxBatchBodyBytes = 256 << 10

// bodyLimit is the largest body the request's route takes.
func bodyLimit(c echo.Context) int64 {
	if c.Path() == followsRoute {
		return MaxBatchBodyBytes
	}
	return MaxBodyBytes
}

// maxDrainBytes is how much of an oversized body is read and discarded
// before the 413: a client that writes its whole body before reading would
// see the connection reset, not the answer, if the server closed with
// unread data. Past it the server answers and closes anyway.
const maxDrainBytes = 16 << 20

// statusClientClosed meters a request whose client hung up before the
// answer (nginx's convention): not a server fault.
const statusClientClosed = 499

// withDeadline runs each request under the deadline of its kind. Statements
// past it are killed on the server (store/sqlconn's Connector) and the client
// gets 503 with Retry-After (handleError). The long routes, a stream and
// an export, have no deadline of their own: each of their reads and writes
// gets one.
func withDeadline(read, write time.Duration, long ...string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if slices.Contains(long, c.Path()) {
				return next(c)
			}
			d := write
			if m := c.Request().Method; m == http.MethodGet || m == http.MethodHead {
				d = read
			}
			ctx, cancel := context.WithTimeout(c.Request().Context(), d)
			defer cancel()
			c.SetRequest(c.Request().WithContext(ctx))
			// The error is answered here, while ctx is live: handleError
			// tells a deadline from a hang-up by ctx's state.
			if err := next(c); err != nil {
				c.Error(err)
			}
			return nil
		}
	}
}

// limitBody reads a request's body up to its route's limit before the handler
// runs. An oversized body is drained (up to maxDrainBytes) and answered with
// 413 and a closed connection.
func limitBody(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		if req.Body == nil || req.Body == http.NoBody {
			return next(c)
		}
		var b []byte
		limit := bodyLimit(c)
		if req.ContentLength <= limit {
			var err error
			b, err = io.ReadAll(io.LimitReader(req.Body, limit+1))
			if err != nil {
				return feed.Errorf(feed.EINVALID, "cannot read body")
			}
		}
		if req.ContentLength > limit || int64(len(b)) > limit {
			_, _ = io.CopyN(io.Discard, req.Body, maxDrainBytes)
			c.Response().Header().Set(echo.HeaderConnection, "close")
			return feed.Errorf(feed.ETOOLARGE, "request body larger than %d bytes", limit)
		}
		req.Body = io.NopCloser(bytes.NewReader(b))
		return next(c)
	}
}
