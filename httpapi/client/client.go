// Package client is a typed Go client of the feed REST API, used by the
// end-to-end tests and the benchmark, and usable by any Go program.
package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Client calls one feed service.
type Client struct {
	base  string
	token string
	http  *http.Client
}

// New returns a client of the service at base (e.g. "http://127.0.0.1:8080").
// token may be empty; hc nil uses a default client, which keeps up to
// maxIdlePerHost idle connections (net/http's default, two, would have most
// requests of a concurrent caller dial).
func New(base, token string, hc *http.Client) *Client {
	if hc == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = maxIdlePerHost
		hc = &http.Client{Transport: t}
	}
	return &Client{base: base, token: token, http: hc}
}

// WithToken returns a client of the same service, over the same
// connections, that sends token: a backend holding the service token can
// serve each of its users with a client of that user's user token.
func (c *Client) WithToken(token string) *Client {
	return &Client{base: c.base, token: token, http: c.http}
}

// maxIdlePerHost is the default client's pool of idle connections.
const maxIdlePerHost = 64

// Post is a post as the API returns it.
type Post struct {
	ContentID   string `json:"content_id"`
	AuthorID    string `json:"author_id"`
	PublishTime int64  `json:"publish_time"`
	Kind        string `json:"kind"`
}

// Page is one page of a list. Only feed pages can be partial: then
// MissingAuthors names the followed authors whose posts could not be read.
type Page[T any] struct {
	Items          []T      `json:"items"`
	NextCursor     *string  `json:"next_cursor"`
	TopCursor      *string  `json:"top_cursor"` // feed pages only
	Partial        bool     `json:"partial"`
	MissingAuthors []string `json:"missing_authors"`
}

// Following is an item of a user's following list.
type Following struct {
	AuthorID   string `json:"author_id"`
	FollowedAt int64  `json:"followed_at"`
}

// Follower is an item of an author's followers list.
type Follower struct {
	UserID     string `json:"user_id"`
	FollowedAt int64  `json:"followed_at"`
}

// Delivery is a post's fan-out progress.
type Delivery struct {
	State            string   `json:"state"`
	Mode             string   `json:"mode"`
	Recipients       int64    `json:"recipients"`
	Delivered        int64    `json:"delivered"`
	PendingDatabases []string `json:"pending_databases"`
}

// Error is an error response of the API.
type Error struct {
	Status  int
	Code    string `json:"code"`
	Message string `json:"message"`
	// RetryAfter is the wait the response asked for (Retry-After on 429
	// rate_limited and 503 unavailable), 0 when none.
	RetryAfter time.Duration `json:"-"`
}

// apiError reads the error envelope of resp, whose body is data.
func apiError(resp *http.Response, data []byte) *Error {
	var env struct {
		Error Error `json:"error"`
	}
	_ = json.Unmarshal(data, &env) // a body that is not the envelope leaves the status alone
	env.Error.Status = resp.StatusCode
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		env.Error.RetryAfter = time.Duration(s) * time.Second
	}
	return &env.Error
}

func (e *Error) Error() string {
	return fmt.Sprintf("feed api: %d %s: %s", e.Status, e.Code, e.Message)
}

// PublishRequest is the body of a publish; zero fields are omitted so the
// server assigns them.
type PublishRequest struct {
	ContentID   string `json:"content_id,omitempty"`
	PublishTime int64  `json:"publish_time,omitempty"`
	Kind        string `json:"kind,omitempty"`
}

// Publish publishes a post; created is false when the server already had it.
func (c *Client) Publish(ctx context.Context, author uint64, req PublishRequest) (p Post, created bool, err error) {
	status, err := c.do(ctx, http.MethodPost, fmt.Sprintf("/v1/users/%d/posts", author), req, &p)
	return p, status == http.StatusCreated, err
}

// DeletePost deletes a post.
func (c *Client) DeletePost(ctx context.Context, author, content uint64) error {
	_, err := c.do(ctx, http.MethodDelete, fmt.Sprintf("/v1/users/%d/posts/%d", author, content), nil, nil)
	return err
}

// Delivery returns a post's fan-out progress.
func (c *Client) Delivery(ctx context.Context, author, content uint64) (d Delivery, err error) {
	_, err = c.do(ctx, http.MethodGet, fmt.Sprintf("/v1/users/%d/posts/%d/delivery", author, content), nil, &d)
	return d, err
}

// Follow makes user follow author.
func (c *Client) Follow(ctx context.Context, user, author uint64) error {
	_, err := c.do(ctx, http.MethodPut, fmt.Sprintf("/v1/users/%d/following/%d", user, author), nil, nil)
	return err
}

// Unfollow makes user stop following author.
func (c *Client) Unfollow(ctx context.Context, user, author uint64) error {
	_, err := c.do(ctx, http.MethodDelete, fmt.Sprintf("/v1/users/%d/following/%d", user, author), nil, nil)
	return err
}

// FollowLimited makes user follow author, bringing only the author's
// copyLimit newest posts from before the follow into the feed
// (?copy_limit=).
func (c *Client) FollowLimited(ctx context.Context, user, author uint64, copyLimit int) error {
	_, err := c.do(ctx, http.MethodPut, fmt.Sprintf("/v1/users/%d/following/%d?copy_limit=%d", user, author, copyLimit), nil, nil)
	return err
}

// UnfollowKeepingHistory makes user stop following author but keeps the
// author's posts the feed holds (?keep_history=true).
func (c *Client) UnfollowKeepingHistory(ctx context.Context, user, author uint64) error {
	_, err := c.do(ctx, http.MethodDelete, fmt.Sprintf("/v1/users/%d/following/%d?keep_history=true", user, author), nil, nil)
	return err
}

// FollowPair is one follow of a FollowMany batch; a nil CopyLimit brings
// the author's whole history.
type FollowPair struct {
	UserID    string `json:"user_id"`
	AuthorID  string `json:"author_id"`
	CopyLimit *int   `json:"copy_limit,omitempty"`
}

// FollowOutcome is what became of one pair of a batch: Status is
// "created", "exists" or "error", with Error set for the last.
type FollowOutcome struct {
	UserID   string `json:"user_id"`
	AuthorID string `json:"author_id"`
	Status   string `json:"status"`
	Error    *Error `json:"error"`
}

// FollowMany makes up to 1,000 follows in one request and returns each
// pair's outcome in order (POST /v1/follows).
func (c *Client) FollowMany(ctx context.Context, pairs []FollowPair) ([]FollowOutcome, error) {
	var out struct {
		Results []FollowOutcome `json:"results"`
	}
	_, err := c.do(ctx, http.MethodPost, "/v1/follows", struct {
		Follows []FollowPair `json:"follows"`
	}{pairs}, &out)
	return out.Results, err
}

// Feed returns one page of the user's home feed.
func (c *Client) Feed(ctx context.Context, user uint64, limit int, cursor string) (Page[Post], error) {
	return getPage[Post](ctx, c, user, "/feed", limit, cursor)
}

// Posts returns one page of the author's own posts.
func (c *Client) Posts(ctx context.Context, author uint64, limit int, cursor string) (Page[Post], error) {
	return getPage[Post](ctx, c, author, "/posts", limit, cursor)
}

// Following returns one page of the authors the user follows.
func (c *Client) Following(ctx context.Context, user uint64, limit int, cursor string) (Page[Following], error) {
	return getPage[Following](ctx, c, user, "/following", limit, cursor)
}

// Followers returns one page of the author's followers.
func (c *Client) Followers(ctx context.Context, author uint64, limit int, cursor string) (Page[Follower], error) {
	return getPage[Follower](ctx, c, author, "/followers", limit, cursor)
}

// All iterates over every item of a list, fetching pages of limit with
// fetch (e.g. c.Feed bound to a user) until next_cursor is null.
func All[T any](ctx context.Context, limit int, fetch func(ctx context.Context, limit int, cursor string) (Page[T], error)) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		cursor := ""
		for {
			page, err := fetch(ctx, limit, cursor)
			if err != nil {
				var zero T
				yield(zero, err)
				return
			}
			for _, it := range page.Items {
				if !yield(it, nil) {
					return
				}
			}
			if page.NextCursor == nil {
				return
			}
			cursor = *page.NextCursor
		}
	}
}

// getPage reads a page of the list at /v1/users/{id}{list}.
func getPage[T any](ctx context.Context, c *Client, id uint64, list string, limit int, cursor string) (Page[T], error) {
	path := "/v1/users/" + strconv.FormatUint(id, 10) + list
	sep := "?"
	if limit > 0 {
		path += sep + "limit=" + strconv.Itoa(limit)
		sep = "&"
	}
	if cursor != "" {
		path += sep + "cursor=" + url.QueryEscape(cursor)
	}
	var p Page[T]
	_, err := c.do(ctx, http.MethodGet, path, nil, pageBody[T]{page: &p, limit: limit})
	return p, err
}

// Marker is a user's read marker with the unread count above it.
type Marker struct {
	Cursor       *string `json:"cursor"`
	UpdatedAt    *int64  `json:"updated_at"`
	Unread       int     `json:"unread"`
	UnreadCapped bool    `json:"unread_capped"`
}

// Marker returns the user's read marker and unread count.
func (c *Client) Marker(ctx context.Context, user uint64) (m Marker, err error) {
	_, err = c.do(ctx, http.MethodGet, "/v1/users/"+strconv.FormatUint(user, 10)+"/feed/marker", nil, &m)
	return m, err
}

// StreamRequest says where a feed stream starts and how it authenticates.
type StreamRequest struct {
	LastEventID string // sent as the Last-Event-ID header when set
	Since       string
	// TokenInQuery sends the token as ?access_token=, as a browser's
	// EventSource must, instead of the Authorization header.
	TokenInQuery bool
}

// Event is one item of a feed stream; ID is its feed position.
type Event struct {
	ID   string
	Post Post
}

// StreamFeed opens the user's feed stream and returns its items as they
// arrive. The channel closes when ctx ends or the server ends the stream.
// The client's own timeout does not apply: a stream has no end.
func (c *Client) StreamFeed(ctx context.Context, user uint64, sr StreamRequest) (<-chan Event, error) {
	q := url.Values{}
	if sr.Since != "" {
		q.Set("since", sr.Since)
	}
	if sr.TokenInQuery && c.token != "" {
		q.Set("access_token", c.token)
	}
	u := c.base + "/v1/users/" + strconv.FormatUint(user, 10) + "/feed/stream"
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	if c.token != "" && !sr.TokenInQuery {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if sr.LastEventID != "" {
		req.Header.Set("Last-Event-ID", sr.LastEventID)
	}
	resp, err := c.untimed(req)
	if err != nil {
		return nil, err
	}
	events := make(chan Event, 64)
	go func() {
		defer close(events)
		defer resp.Body.Close()
		readEvents(ctx, resp.Body, events)
	}()
	return events, nil
}

// Export returns the body of the user's export: JSON Lines, one record
// (feed.ParseRecord reads it) a line, in the format feedd import reads. The
// caller reads it to the end and closes it; a body cut short by the server
// ends in an error, not EOF. The client's own timeout does not apply.
func (c *Client) Export(ctx context.Context, user uint64) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/v1/users/"+strconv.FormatUint(user, 10)+"/export", nil)
	if err != nil {
		return nil, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.untimed(req)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// untimed sends req without the client's timeout, which would cut a long
// body short, and returns a 200 response; another status is an *Error.
func (c *Client) untimed(req *http.Request) (*http.Response, error) {
	hc := *c.http
	hc.Timeout = 0
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10)) // an error body is short; a cut one still has its status
		return nil, apiError(resp, data)
	}
	return resp, nil
}

// readEvents parses Server-Sent Events of kind item from r into events,
// skipping comments and other fields, until r ends, holds a malformed item
// or ctx ends.
func readEvents(ctx context.Context, r io.Reader, events chan<- Event) {
	sc := bufio.NewScanner(r)
	var id, kind, data string
	for sc.Scan() {
		field, value, _ := strings.Cut(sc.Text(), ": ")
		switch field {
		case "id":
			id = value
		case "event":
			kind = value
		case "data":
			data = value
		case "":
			if kind == "item" {
				e := Event{ID: id}
				if json.Unmarshal([]byte(data), &e.Post) != nil {
					return
				}
				select {
				case events <- e:
				case <-ctx.Done():
					return
				}
			}
			id, kind, data = "", "", ""
		}
	}
}

// do sends a request to path (with its query) and decodes a JSON answer
// into out; an error status becomes *Error.
func (c *Client) do(ctx context.Context, method, path string, body, out any) (int, error) {
	u := c.base + path
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return 0, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	buf := bodyPool.Get().(*bytes.Buffer)
	defer putBody(buf)
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		return resp.StatusCode, err
	}
	data := buf.Bytes()
	if resp.StatusCode >= 400 {
		return resp.StatusCode, apiError(resp, data)
	}
	if out != nil && len(data) > 0 {
		if d, ok := out.(decoder); ok {
			err = d.decode(data)
		} else {
			err = json.Unmarshal(data, out)
		}
		if err != nil {
			return resp.StatusCode, fmt.Errorf("feed api: decode %s %s: %w", method, path, err)
		}
	}
	return resp.StatusCode, nil
}

// decoder is an answer that decodes its own body (pageBody).
type decoder interface {
	decode(data []byte) error
}

// bodyPool recycles the buffers answers are read into; decoding copies
// what it keeps.
var bodyPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledBody bounds the buffers kept in bodyPool.
const maxPooledBody = 1 << 20

func putBody(buf *bytes.Buffer) {
	if buf.Cap() <= maxPooledBody {
		buf.Reset()
		bodyPool.Put(buf)
	}
}

// MoveCount is one part of a move's progress.
type MoveCount struct {
	Moved   int64 `json:"moved"`
	Skipped int64 `json:"skipped"`
	Total   int64 `json:"total"`
}

// Move is an account move and its progress.
type Move struct {
	UserID    string    `json:"user_id"`
	To        string    `json:"to"`
	State     string    `json:"state"` // pending, running or done
	Follows   MoveCount `json:"follows"`
	Mutes     MoveCount `json:"mutes"`
	Hides     MoveCount `json:"hides"`
	Marker    MoveCount `json:"marker"`
	Followers MoveCount `json:"followers"`
	CreatedAt int64     `json:"created_at"`
	UpdatedAt int64     `json:"updated_at"`
}

// Move starts moving user's follows, mutes, hides, read marker and
// followers to the id to, and returns the move's progress. Repeating it is
// idempotent; another to while the move is unfinished is a 409 conflict.
func (c *Client) Move(ctx context.Context, user, to uint64) (m Move, err error) {
	body := struct {
		To string `json:"to"`
	}{strconv.FormatUint(to, 10)}
	_, err = c.do(ctx, http.MethodPost, "/v1/users/"+strconv.FormatUint(user, 10)+"/move", body, &m)
	return m, err
}

// MoveStatus returns the progress of user's move (404 if it was never moved).
func (c *Client) MoveStatus(ctx context.Context, user uint64) (m Move, err error) {
	_, err = c.do(ctx, http.MethodGet, "/v1/users/"+strconv.FormatUint(user, 10)+"/move", nil, &m)
	return m, err
}
