package console

import (
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"
)

// The handlers, one per page or action: each reads through the service
// and renders, or acts and redirects back.

func (c *console) overview(ec echo.Context) error {
	o := c.svc.Overview(ec.Request().Context())
	return c.render(ec, http.StatusOK, "overview", overviewPage{Overview: o, Rows: rowsChart(o.Activity), Latency: latencyChart(o.Activity)})
}

func (c *console) deliveries(ec echo.Context) error {
	return c.render(ec, http.StatusOK, "deliveries", c.svc.Deliveries(ec.Request().Context()))
}

// retryTask makes a stuck task claimable at once.
func (c *console) retryTask(ec echo.Context) error {
	author, err1 := strconv.ParseUint(ec.FormValue("author_id"), 10, 64)
	content, err2 := strconv.ParseUint(ec.FormValue("content_id"), 10, 64)
	seq, err3 := strconv.Atoi(ec.FormValue("seq"))
	if err1 != nil || err2 != nil || err3 != nil {
		return ec.String(http.StatusBadRequest, "author_id, content_id and seq must be integers")
	}
	msg := "task " + strconv.Itoa(seq) + " of post " + strconv.FormatUint(content, 10) + " retried"
	if err := c.svc.RetryTask(ec.Request().Context(), author, content, seq); err != nil {
		msg = "retry: " + safeError(err)
	}
	return c.redirectWith(ec, Prefix+"/deliveries", msg)
}

func (c *console) reshard(ec echo.Context) error {
	return c.render(ec, http.StatusOK, "reshard", c.svc.Reshard(ec.Request().Context()))
}

// abortReshard starts an abort in the background; the page shows its
// outcome.
func (c *console) abortReshard(ec echo.Context) error {
	msg := "abort started"
	if err := c.svc.AbortReshard(ec.Request().Context()); err != nil {
		msg = "abort: " + safeError(err)
	}
	return c.redirectWith(ec, Prefix+"/reshard", msg)
}

// findUser answers the navigation's user form.
func (c *console) findUser(ec echo.Context) error {
	id, err := strconv.ParseUint(ec.QueryParam("id"), 10, 64)
	if err != nil {
		return c.render(ec, http.StatusBadRequest, "error", "a user id is an unsigned integer")
	}
	return redirect(ec, Prefix+"/users/"+strconv.FormatUint(id, 10))
}

// user shows a page of the user's feed at ?cursor= (the API's cursor) and
// a page of the authors they follow at ?following=.
func (c *console) user(ec echo.Context) error {
	id, err := strconv.ParseUint(ec.Param("id"), 10, 64)
	if err != nil {
		return c.render(ec, http.StatusBadRequest, "error", "a user id is an unsigned integer")
	}
	v, err := c.svc.InspectUser(ec.Request().Context(), id, ec.QueryParam("cursor"), ec.QueryParam("following"))
	if err != nil {
		return c.fail(ec, err)
	}
	return c.render(ec, http.StatusOK, "user", userPage{UserView: v, Cursor: ec.QueryParam("cursor")})
}
