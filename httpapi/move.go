package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/feedhq/feed"
)

// moveCountJSON is one part of a move's progress.
type moveCountJSON struct {
	Moved   int64 `json:"moved"`
	Skipped int64 `json:"skipped"`
	Total   int64 `json:"total"`
}

// moveJSON is an account move and its progress.
type moveJSON struct {
	UserID    string        `json:"user_id"`
	To        string        `json:"to"`
	State     string        `json:"state"`
	Follows   moveCountJSON `json:"follows"`
	Mutes     moveCountJSON `json:"mutes"`
	Hides     moveCountJSON `json:"hides"`
	Marker    moveCountJSON `json:"marker"`
	Followers moveCountJSON `json:"followers"`
	CreatedAt int64         `json:"created_at"`
	UpdatedAt int64         `json:"updated_at"`
}

func toMoveJSON(m feed.Move) moveJSON {
	count := func(c feed.MoveCount) moveCountJSON { return moveCountJSON(c) }
	return moveJSON{
		UserID: strconv.FormatUint(m.From, 10), To: strconv.FormatUint(m.To, 10), State: m.State,
		Follows: count(m.Follows), Mutes: count(m.Mutes), Hides: count(m.Hides), Marker: count(m.Marker),
		Followers: count(m.Followers), CreatedAt: m.CreatedAt, UpdatedAt: m.UpdatedAt,
	}
}

// moveBody is the move request: the id to move to, a decimal string or a
// JSON integer.
type moveBody struct {
	To json.RawMessage `json:"to"`
}

func (a *api) startMove(c echo.Context) error {
	user, err := pathID(c, "id")
	if err != nil {
		return err
	}
	var body moveBody
	if err := decodeBody(c, &body); err != nil {
		return err
	}
	if len(body.To) == 0 || string(body.To) == "null" {
		return feed.Errorf(feed.EINVALID, "to is required")
	}
	s := string(body.To)
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		s = s[1 : len(s)-1]
	}
	to, err := parseID("to", s)
	if err != nil {
		return err
	}
	m, err := a.svc.Move(c.Request().Context(), user, to)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusAccepted, toMoveJSON(m))
}

func (a *api) getMove(c echo.Context) error {
	user, err := pathID(c, "id")
	if err != nil {
		return err
	}
	m, err := a.svc.MoveStatus(c.Request().Context(), user)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toMoveJSON(m))
}
