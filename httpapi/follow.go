package httpapi

import (
	"context"
	"net/http"
	"strconv"

	"github.com/feedhq/feed"
	"github.com/labstack/echo/v4"
)

// pairAction serves a PUT or DELETE on a pair of ids, the path's :id and
// the named parameter: one service call, then 204.
func pairAction(other string, do func(ctx context.Context, id, otherID uint64) error) echo.HandlerFunc {
	return func(c echo.Context) error {
		id, otherID, err := pathIDs(c, "id", other)
		if err != nil {
			return err
		}
		if err := do(c.Request().Context(), id, otherID); err != nil {
			return err
		}
		return c.NoContent(http.StatusNoContent)
	}
}

type followingJSON struct {
	AuthorID   string `json:"author_id"`
	FollowedAt int64  `json:"followed_at"`
}

type followerJSON struct {
	UserID     string `json:"user_id"`
	FollowedAt int64  `json:"followed_at"`
}

func toFollowingJSON(f feed.Follow) followingJSON {
	return followingJSON{AuthorID: strconv.FormatUint(f.AuthorID, 10), FollowedAt: f.FollowedAt}
}

func toFollowerJSON(f feed.Follow) followerJSON {
	return followerJSON{UserID: strconv.FormatUint(f.UserID, 10), FollowedAt: f.FollowedAt}
}

func (a *api) listFollowing(c echo.Context) error {
	return listPage(c, a.svc.ListFollowing, jsonPage(toFollowingJSON))
}

func (a *api) listFollowers(c echo.Context) error {
	return listPage(c, a.svc.ListFollowers, jsonPage(toFollowerJSON))
}
