package httpapi

import (
	"net/http"
	"strconv"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/service"
	"github.com/labstack/echo/v4"
)

// postJSON is a post on the wire: ids as decimal strings.
type postJSON struct {
	ContentID   string `json:"content_id"`
	AuthorID    string `json:"author_id"`
	PublishTime int64  `json:"publish_time"`
	Kind        string `json:"kind"`
}

func toPostJSON(p feed.Post) postJSON {
	return postJSON{
		ContentID:   strconv.FormatUint(p.ContentID, 10),
		AuthorID:    strconv.FormatUint(p.AuthorID, 10),
		PublishTime: p.PublishTime,
		Kind:        p.Kind,
	}
}

// publishBody is the publish request. Ids may be strings or numbers.
type publishBody struct {
	ContentID   *jsonID `json:"content_id"`
	PublishTime *int64  `json:"publish_time"`
	Kind        *string `json:"kind"`
}

func (a *api) publishPost(c echo.Context) error {
	author, err := pathID(c, "id")
	if err != nil {
		return err
	}
	var body publishBody
	if err := decodeBody(c, &body); err != nil {
		return err
	}
	in := service.PublishInput{AuthorID: author, PublishTime: body.PublishTime}
	if body.ContentID != nil {
		in.ContentID = uint64(*body.ContentID)
	}
	if body.Kind != nil {
		if *body.Kind == "" {
			return feed.Errorf(feed.EINVALID, "kind must not be empty")
		}
		in.Kind = *body.Kind
	}
	p, created, err := a.svc.Publish(c.Request().Context(), in)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	return c.JSON(status, toPostJSON(p))
}

func (a *api) deletePost(c echo.Context) error {
	author, content, err := pathIDs(c, "id", "content_id")
	if err != nil {
		return err
	}
	if err := a.svc.DeletePost(c.Request().Context(), author, content); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

func (a *api) listPosts(c echo.Context) error {
	return listPage(c, a.svc.ListPosts, func(c echo.Context, posts []feed.Post, next string) error {
		return writePostPage(c, feed.FeedPage{Items: posts, Next: next}, false)
	})
}

type deliveryJSON struct {
	State            string   `json:"state"`
	Mode             string   `json:"mode"`
	Recipients       int64    `json:"recipients"`
	Delivered        int64    `json:"delivered"`
	PendingDatabases []string `json:"pending_databases,omitempty"`
}

func (a *api) getDelivery(c echo.Context) error {
	author, content, err := pathIDs(c, "id", "content_id")
	if err != nil {
		return err
	}
	d, err := a.svc.Delivery(c.Request().Context(), author, content)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, deliveryJSON{State: d.State, Mode: d.Mode, Recipients: d.Recipients, Delivered: d.Delivered,
		PendingDatabases: d.PendingDatabases})
}
