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
)

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

// postPagePool recycles the buffers of encoded post pages.
var postPagePool = sync.Pool{New: func() any { return new([]byte) }}

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
