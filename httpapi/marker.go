package httpapi

import (
	"net/http"

	"github.com/feedhq/feed"
	"github.com/labstack/echo/v4"
)

// markerJSON is a read marker: cursor and updated_at are null while the
// user has none.
type markerJSON struct {
	Cursor       *string `json:"cursor"`
	UpdatedAt    *int64  `json:"updated_at"`
	Unread       int     `json:"unread"`
	UnreadCapped bool    `json:"unread_capped"`
}

func toMarkerJSON(m feed.Marker) markerJSON {
	out := markerJSON{Unread: m.Unread, UnreadCapped: m.Capped}
	if m.Cursor != "" {
		out.Cursor, out.UpdatedAt = &m.Cursor, &m.UpdatedAt
	}
	return out
}

func (a *api) getMarker(c echo.Context) error {
	user, err := pathID(c, "id")
	if err != nil {
		return err
	}
	m, err := a.svc.Marker(c.Request().Context(), user)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toMarkerJSON(m))
}

// markerBody is the marker request: the position to move the marker to.
type markerBody struct {
	Cursor *string `json:"cursor"`
}

func (a *api) putMarker(c echo.Context) error {
	user, err := pathID(c, "id")
	if err != nil {
		return err
	}
	var body markerBody
	if err := decodeBody(c, &body); err != nil {
		return err
	}
	if body.Cursor == nil {
		return feed.Errorf(feed.EINVALID, "cursor is required")
	}
	m, err := a.svc.SetMarker(c.Request().Context(), user, *body.Cursor)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toMarkerJSON(m))
}
