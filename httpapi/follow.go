package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/service"
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

// followAuthor serves PUT following: ?copy_limit= bounds the author's
// older posts the follow brings (absent or empty: all of them).
func (a *api) followAuthor(c echo.Context) error {
	userID, authorID, err := pathIDs(c, "id", "author_id")
	if err != nil {
		return err
	}
	req := feed.FollowRequest{UserID: userID, AuthorID: authorID}
	if s := c.QueryParam("copy_limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			return feed.Errorf(feed.EINVALID, "copy_limit must be an integer in 0..%d", a.svc.Config().InboxLimit)
		}
		req.CopyLimit = &n
	}
	if err := a.svc.FollowWith(c.Request().Context(), req); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// unfollowAuthor serves DELETE following: ?keep_history=true keeps the
// author's posts the feed holds.
func (a *api) unfollowAuthor(c echo.Context) error {
	userID, authorID, err := pathIDs(c, "id", "author_id")
	if err != nil {
		return err
	}
	unfollow := a.svc.Unfollow
	switch c.QueryParam("keep_history") {
	case "", "false":
	case "true":
		unfollow = a.svc.UnfollowKeepingHistory
	default:
		return feed.Errorf(feed.EINVALID, "keep_history must be true or false")
	}
	if err := unfollow(c.Request().Context(), userID, authorID); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// followsRoute is the batch follow, whose body may be larger than others'.
const followsRoute = "/v1/follows"

type followsBody struct {
	Follows []followPairJSON `json:"follows"`
}

type followPairJSON struct {
	UserID    *jsonID `json:"user_id"`
	AuthorID  *jsonID `json:"author_id"`
	CopyLimit *int    `json:"copy_limit"`
}

// UnmarshalJSON reads a pair as decodeBody reads a body: a member whose
// name is not exactly one of the pair's is an error.
func (f *followPairJSON) UnmarshalJSON(b []byte) error {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(b, &members); err != nil || members == nil {
		return errors.New("each follow must be a JSON object")
	}
	known := jsonFields(f)
	for name := range members {
		if !known[name] {
			return fmt.Errorf("unknown field %q in a follow", truncate(name, 64))
		}
	}
	type plain followPairJSON // without this method
	err := json.Unmarshal(b, (*plain)(f))
	var ie *invalidID
	if errors.As(err, &ie) {
		return errors.New("user_id and author_id must be decimal strings or integers in 1..18446744073709551615")
	}
	return err
}

type followResultJSON struct {
	UserID   string     `json:"user_id"`
	AuthorID string     `json:"author_id"`
	Status   string     `json:"status"` // created, exists or error
	Error    *errorJSON `json:"error,omitempty"`
}

// followMany serves POST /v1/follows: each pair's outcome in order. A
// body that is not a list of 1..MaxFollowBatch well-formed pairs, or that
// names a user other than a user token's, changes nothing.
func (a *api) followMany(c echo.Context) error {
	var body followsBody
	if err := decodeBody(c, &body); err != nil {
		return err
	}
	if len(body.Follows) > service.MaxFollowBatch {
		return feed.Errorf(feed.ETOOLARGE, "follows holds %d pairs, more than %d", len(body.Follows), service.MaxFollowBatch)
	}
	reqs := make([]feed.FollowRequest, len(body.Follows))
	for i, f := range body.Follows {
		if f.UserID == nil || f.AuthorID == nil {
			return feed.Errorf(feed.EINVALID, "follows[%d] needs user_id and author_id", i)
		}
		reqs[i] = feed.FollowRequest{UserID: uint64(*f.UserID), AuthorID: uint64(*f.AuthorID), CopyLimit: f.CopyLimit}
		if err := actAs(c, reqs[i].UserID); err != nil {
			return err
		}
	}
	results, err := a.svc.FollowMany(c.Request().Context(), reqs)
	if err != nil {
		return err
	}
	out := struct {
		Results []followResultJSON `json:"results"`
	}{make([]followResultJSON, len(results))}
	for i, r := range results {
		o := followResultJSON{UserID: strconv.FormatUint(reqs[i].UserID, 10), AuthorID: strconv.FormatUint(reqs[i].AuthorID, 10), Status: "exists"}
		switch {
		case r.Err != nil:
			o.Status = "error"
			o.Error = &errorJSON{Code: feed.ErrorCode(r.Err), Message: feed.ErrorMessage(r.Err)}
			if o.Error.Code == feed.EINTERNAL {
				a.log.Error("http: internal error", "method", c.Request().Method, "path", c.Request().URL.Path, "error", r.Err)
			}
		case r.Created:
			o.Status = "created"
		}
		out.Results[i] = o
	}
	return c.JSON(http.StatusOK, out)
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
