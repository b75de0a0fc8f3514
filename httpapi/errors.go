package httpapi

import (
	"context"
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/feedhq/feed"
)

// codes maps error codes to HTTP statuses.
var codes = map[string]int{
	feed.EINVALID:      http.StatusBadRequest,
	feed.EUNAUTHORIZED: http.StatusUnauthorized,
	feed.EFORBIDDEN:    http.StatusForbidden,
	feed.ENOTFOUND:     http.StatusNotFound,
	feed.ECONFLICT:     http.StatusConflict,
	feed.ELIMIT:        http.StatusConflict,
	feed.ESESSION:      http.StatusGone,
	feed.ETOOLARGE:     http.StatusRequestEntityTooLarge,
	feed.ERATELIMITED:  http.StatusTooManyRequests,
	feed.ESTREAMS:      http.StatusTooManyRequests,
	feed.EUNAVAILABLE:  http.StatusServiceUnavailable,
	feed.EINTERNAL:     http.StatusInternalServerError,
}

type errorBody struct {
	Error errorJSON `json:"error"`
}

// errorJSON is an error's code and message, as the error body and a batch's
// failed items carry them.
type errorJSON struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// handleError writes every error as the contract's envelope. Echo's own
// errors (no route, wrong method) get the nearest code; a wrong method keeps
// its 405 status and names the allowed methods. A request past its deadline
// is 503, whatever the interrupted statement returned; one whose client hung
// up is metered as 499 and logged at debug. Only internal errors are logged
// at error, and clients never see their text.
func (a *api) handleError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	status, code, msg := http.StatusInternalServerError, feed.EINTERNAL, "internal error"
	var he *echo.HTTPError
	ctxErr := c.Request().Context().Err()
	switch {
	case errors.Is(ctxErr, context.Canceled):
		a.log.Debug("http: client closed the request", "method", c.Request().Method, "path", c.Request().URL.Path, "error", err)
		_ = c.NoContent(statusClientClosed)
		return
	case errors.Is(ctxErr, context.DeadlineExceeded):
		status, code, msg = http.StatusServiceUnavailable, feed.EUNAVAILABLE, "the database did not answer within the request deadline"
	case errors.As(err, &he):
		status = he.Code
		switch he.Code {
		case http.StatusNotFound:
			code, msg = feed.ENOTFOUND, "no such route"
		case http.StatusMethodNotAllowed:
			code, msg = feed.EINVALID, "method "+c.Request().Method+" not allowed on this path"
		case http.StatusRequestEntityTooLarge:
			code, msg = feed.ETOOLARGE, "request body too large"
		case http.StatusUnauthorized:
			code, msg = feed.EUNAUTHORIZED, "unauthorized"
		default:
			if he.Code < 500 {
				code, msg = feed.EINVALID, http.StatusText(he.Code)
			}
		}
	default:
		code, msg = feed.ErrorCode(err), feed.ErrorMessage(err)
		status = codes[code]
	}
	if h := c.Response().Header(); status == http.StatusServiceUnavailable || (status == http.StatusTooManyRequests && h.Get(echo.HeaderRetryAfter) == "") {
		h.Set(echo.HeaderRetryAfter, "1")
	}
	if status == http.StatusUnauthorized {
		c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="feed"`)
	}
	if code == feed.EINTERNAL {
		a.log.Error("http: internal error", "method", c.Request().Method, "path", c.Request().URL.Path, "error", err)
	}
	var body errorBody
	body.Error.Code, body.Error.Message = code, msg
	if c.Request().Method == http.MethodHead {
		_ = c.NoContent(status)
		return
	}
	_ = c.JSON(status, body)
}
