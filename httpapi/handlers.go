package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"github.com/labstack/echo/v4"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/service"
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

type pageJSON[T any] struct {
	Items      []T     `json:"items"`
	NextCursor *string `json:"next_cursor"`
}

func newPage[T, U any](items []U, next string, conv func(U) T) pageJSON[T] {
	out := pageJSON[T]{Items: make([]T, len(items))}
	for i, it := range items {
		out.Items[i] = conv(it)
	}
	if next != "" {
		out.NextCursor = &next
	}
	return out
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

// filterAction adapts a service call that sets (on) or lifts a mute or
// hide to pairAction.
func filterAction(set func(ctx context.Context, id, otherID uint64, on bool) error, on bool) func(ctx context.Context, id, otherID uint64) error {
	return func(ctx context.Context, id, otherID uint64) error { return set(ctx, id, otherID, on) }
}

type followingJSON struct {
	AuthorID   string `json:"author_id"`
	FollowedAt int64  `json:"followed_at"`
}

type followerJSON struct {
	UserID     string `json:"user_id"`
	FollowedAt int64  `json:"followed_at"`
}

type mutedJSON struct {
	AuthorID string `json:"author_id"`
	MutedAt  int64  `json:"muted_at"`
}

type hiddenJSON struct {
	UserID   string `json:"user_id"`
	HiddenAt int64  `json:"hidden_at"`
}

func toMutedJSON(m feed.Mute) mutedJSON {
	return mutedJSON{AuthorID: strconv.FormatUint(m.AuthorID, 10), MutedAt: m.At}
}

func toHiddenJSON(m feed.Mute) hiddenJSON {
	return hiddenJSON{UserID: strconv.FormatUint(m.UserID, 10), HiddenAt: m.At}
}

func toFollowingJSON(f feed.Follow) followingJSON {
	return followingJSON{AuthorID: strconv.FormatUint(f.AuthorID, 10), FollowedAt: f.FollowedAt}
}

func toFollowerJSON(f feed.Follow) followerJSON {
	return followerJSON{UserID: strconv.FormatUint(f.UserID, 10), FollowedAt: f.FollowedAt}
}

// listPage serves a page of a list keyed by the user in the path: parse the
// id and the page, make the one service call, respond with write.
func listPage[U any](c echo.Context, list func(ctx context.Context, id uint64, page feed.Page) ([]U, string, error), write func(echo.Context, []U, string) error) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	page, err := parsePage(c)
	if err != nil {
		return err
	}
	items, next, err := list(c.Request().Context(), id, page)
	if err != nil {
		return err
	}
	return write(c, items, next)
}

// jsonPage writes a page through encoding/json, each item converted by conv.
func jsonPage[T, U any](conv func(U) T) func(echo.Context, []U, string) error {
	return func(c echo.Context, items []U, next string) error {
		return c.JSON(http.StatusOK, newPage(items, next, conv))
	}
}

// postPageJSON is a page of posts: an author's, or the feed's, which has a
// top cursor (null on an empty page) and names the authors whose posts it
// could not read.
type postPageJSON struct {
	pageJSON[postJSON]
	TopCursor      **string `json:"top_cursor,omitempty"` // nil outside the feed
	Partial        bool     `json:"partial,omitempty"`
	MissingAuthors []string `json:"missing_authors,omitempty"`
}

func newPostPage(p feed.FeedPage, isFeed bool) postPageJSON {
	out := postPageJSON{pageJSON: newPage(p.Items, p.Next, toPostJSON)}
	if isFeed {
		var top *string
		if p.Top != "" {
			top = &p.Top
		}
		out.TopCursor = &top
	}
	if len(p.MissingAuthors) > 0 {
		out.Partial = true
		out.MissingAuthors = make([]string, len(p.MissingAuthors))
		for i, a := range p.MissingAuthors {
			out.MissingAuthors[i] = strconv.FormatUint(a, 10)
		}
	}
	return out
}

// postPagePool recycles the buffers of encoded post pages.
var postPagePool = sync.Pool{New: func() any { return new([]byte) }}

// writePostPage writes a page of posts: the feed's, or an author's, which
// has no top cursor and no missing authors. The bytes are those
// encoding/json writes for newPostPage(p, isFeed) as c.JSON sends them (?pretty and debug
// mode are left to c.JSON itself), appended without reflection or an
// allocation per item: feed pages are the service's hottest response.
func writePostPage(c echo.Context, p feed.FeedPage, isFeed bool) error {
	if _, pretty := c.QueryParams()["pretty"]; pretty || c.Echo().Debug {
		return c.JSON(http.StatusOK, newPostPage(p, isFeed))
	}
	buf := postPagePool.Get().(*[]byte)
	defer postPagePool.Put(buf)
	*buf = appendPostPage((*buf)[:0], p, isFeed)
	c.Response().Header().Set(echo.HeaderContentLength, strconv.Itoa(len(*buf)))
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, *buf)
}

func appendPostPage(b []byte, page feed.FeedPage, isFeed bool) []byte {
	b = append(b, `{"items":[`...)
	for i, p := range page.Items {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendPost(b, p)
	}
	b = append(b, `],"next_cursor":`...)
	b = appendCursor(b, page.Next)
	if isFeed {
		b = append(b, `,"top_cursor":`...)
		b = appendCursor(b, page.Top)
	}
	if len(page.MissingAuthors) > 0 {
		b = append(b, `,"partial":true,"missing_authors":[`...)
		for i, a := range page.MissingAuthors {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, '"')
			b = strconv.AppendUint(b, a, 10)
			b = append(b, '"')
		}
		b = append(b, ']')
	}
	return append(b, "}\n"...)
}

// appendPost appends a post as toPostJSON and encoding/json write it.
func appendPost(b []byte, p feed.Post) []byte {
	b = append(b, `{"content_id":"`...)
	b = strconv.AppendUint(b, p.ContentID, 10)
	b = append(b, `","author_id":"`...)
	b = strconv.AppendUint(b, p.AuthorID, 10)
	b = append(b, `","publish_time":`...)
	b = strconv.AppendInt(b, p.PublishTime, 10)
	b = append(b, `,"kind":`...)
	b = appendJSONString(b, p.Kind)
	return append(b, '}')
}

// appendCursor appends a cursor, null for "".
func appendCursor(b []byte, cursor string) []byte {
	if cursor == "" {
		return append(b, "null"...)
	}
	return appendJSONString(b, cursor)
}

// appendJSONString appends s quoted. Kinds and cursors are printable ASCII
// that needs no escape; anything else goes through encoding/json, so the
// escapes (HTML-safe ones included) stay exactly its own.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

func (a *api) listFollowing(c echo.Context) error {
	return listPage(c, a.svc.ListFollowing, jsonPage(toFollowingJSON))
}

func (a *api) listFollowers(c echo.Context) error {
	return listPage(c, a.svc.ListFollowers, jsonPage(toFollowerJSON))
}

func (a *api) listMuted(c echo.Context) error {
	return listPage(c, a.svc.ListMuted, jsonPage(toMutedJSON))
}

func (a *api) listHiddenFrom(c echo.Context) error {
	return listPage(c, a.svc.ListHiddenFrom, jsonPage(toHiddenJSON))
}

func (a *api) getFeed(c echo.Context) error {
	user, err := pathID(c, "id")
	if err != nil {
		return err
	}
	page, err := parsePage(c)
	if err != nil {
		return err
	}
	page.Since = c.QueryParam("since")
	if c.QueryParams().Has("kinds") {
		page.Kinds = strings.Split(c.QueryParam("kinds"), ",")
	}
	p, err := a.svc.Feed(c.Request().Context(), user, page)
	if err != nil {
		return err
	}
	return writePostPage(c, p, true)
}

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

// parseID parses a user, author or content id: a decimal uint64 above zero.
func parseID(name, s string) (uint64, error) {
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil || id == 0 {
		return 0, feed.Errorf(feed.EINVALID, "%s must be a decimal integer in 1..18446744073709551615", name)
	}
	return id, nil
}

func pathID(c echo.Context, name string) (uint64, error) {
	label := name
	if name == "id" {
		label = "user id"
	}
	return parseID(label, c.Param(name))
}

func pathIDs(c echo.Context, first, second string) (uint64, uint64, error) {
	a, err := pathID(c, first)
	if err != nil {
		return 0, 0, err
	}
	b, err := pathID(c, second)
	return a, b, err
}

// parsePage reads ?limit= (default 20, 1..100) and ?cursor=.
func parsePage(c echo.Context) (feed.Page, error) {
	p := feed.Page{Limit: feed.DefaultPageLimit, Cursor: c.QueryParam("cursor")}
	if s := c.QueryParam("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > feed.MaxPageLimit {
			return p, feed.Errorf(feed.EINVALID, "limit must be an integer in 1..%d", feed.MaxPageLimit)
		}
		p.Limit = n
	}
	return p, nil
}

// decodeBody decodes a JSON object body strictly: anything but one object,
// a key that is not exactly one of v's JSON field names (encoding/json would
// match keys case-insensitively) and trailing data are errors. An empty body
// is an empty object; a null member is the same as an absent one.
func decodeBody(c echo.Context, v any) error {
	b, err := io.ReadAll(c.Request().Body)
	if err != nil {
		var he *echo.HTTPError
		if errors.As(err, &he) {
			return he
		}
		return feed.Errorf(feed.EINVALID, "cannot read body")
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	var members map[string]json.RawMessage
	var syntax *json.SyntaxError
	if err := json.Unmarshal(b, &members); errors.As(err, &syntax) {
		return feed.Errorf(feed.EINVALID, "invalid JSON body: %s at offset %d", syntax, syntax.Offset)
	} else if err != nil || members == nil {
		return feed.Errorf(feed.EINVALID, "invalid JSON body: want a JSON object")
	}
	known := jsonFields(v)
	for name := range members {
		if !known[name] {
			return feed.Errorf(feed.EINVALID, "invalid JSON body: unknown field %q", truncate(name, 64))
		}
	}
	if err := json.Unmarshal(b, v); err != nil {
		return feed.Errorf(feed.EINVALID, "invalid JSON body: %s", jsonProblem(err))
	}
	return nil
}

// jsonFields returns the JSON names of the fields of the struct v points to.
func jsonFields(v any) map[string]bool {
	t := reflect.TypeOf(v).Elem()
	names := make(map[string]bool, t.NumField())
	for f := range t.Fields() {
		if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" && name != "-" {
			names[name] = true
		}
	}
	return names
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// jsonProblem describes a decode error without echoing input back.
func jsonProblem(err error) string {
	var te *json.UnmarshalTypeError
	var ie *invalidID
	switch {
	case errors.As(err, &ie):
		return ie.Error()
	case errors.As(err, &te):
		return "field " + te.Field + " has the wrong type"
	}
	return err.Error()
}

// jsonID is an id in a request body: a decimal string or a JSON number.
type jsonID uint64

type invalidID struct{}

func (*invalidID) Error() string {
	return "content_id must be a decimal string or integer in 1..18446744073709551615"
}

func (id *jsonID) UnmarshalJSON(b []byte) error {
	s := string(b)
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		s = s[1 : len(s)-1]
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n == 0 {
		return &invalidID{}
	}
	*id = jsonID(n)
	return nil
}
