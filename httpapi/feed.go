package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"github.com/feedhq/feed"
	"github.com/labstack/echo/v4"
)

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
