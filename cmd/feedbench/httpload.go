package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// httpLoad is phase C's HTTP load generator, built the way wrk-style
// generators are: each closed-loop client owns one keep-alive HTTP/1.1
// connection, writes a GET in one call and reads the response on the same
// goroutine, parsing the status line, the framing headers and, in the body,
// only next_cursor and the number of items. The typed client
// (httpapi/client) also decodes every item with encoding/json and runs
// net/http's transport goroutines; the benchmark shares the server's two
// CPUs, so that client work would be charged to the server. Phase C keeps a
// row read through the typed client as a diagnostic.
type httpLoad struct {
	pool connPool

	mu   sync.Mutex
	held []*httpConn // connections sessions hold
}

func newHTTPLoad(addr string) *httpLoad { return &httpLoad{pool: connPool{addr: addr}} }

// httpConn is one client's connection.
type httpConn struct {
	c   net.Conn
	r   *bufio.Reader
	req []byte
	buf []byte
	// closed: the server said it closes the connection after its last
	// response.
	closed bool
	// broken: a request on it failed in transport; it is not reused.
	broken bool
}

// pager returns a pager that reads feed pages of pageLimit items over the
// session's connection, taking one on first use; query, if not empty, is
// added to every request's (as "kinds=photo").
func (h *httpLoad) pager(query string) pager {
	return func(ctx context.Context, s *session) (bool, error) {
		path := feedPath(s.user, s.cursor)
		if query != "" {
			path += "&" + query
		}
		body, err := h.get(ctx, s, path)
		if err != nil {
			return false, err
		}
		next, items, err := scanPage(body)
		if err != nil {
			return false, err
		}
		if next == "" {
			s.cursor = ""
			return false, nil
		}
		if items != pageLimit {
			return false, fmt.Errorf("page with a next cursor has %d items, want %d", items, pageLimit)
		}
		s.cursor = next
		return true, nil
	}
}

// unreadPager returns a pager whose sessions are one read marker with its
// unread count each, checked to be unread.
func (h *httpLoad) unreadPager(unread int) pager {
	want := []byte(`"unread":` + strconv.Itoa(unread) + `,`)
	return func(ctx context.Context, s *session) (bool, error) {
		body, err := h.get(ctx, s, "/v1/users/"+strconv.FormatUint(s.user, 10)+"/feed/marker")
		if err == nil && !bytes.Contains(body, want) {
			err = fmt.Errorf("marker of user %d without %s: %.200q", s.user, want, body)
		}
		return false, err
	}
}

// feedPath is the path of a feed page of pageLimit items.
func feedPath(user uint64, cursor string) string {
	path := "/v1/users/" + strconv.FormatUint(user, 10) + "/feed?limit=" + strconv.Itoa(pageLimit)
	if cursor != "" {
		path += "&cursor=" + url.QueryEscape(cursor)
	}
	return path
}

// get requests path over the session's connection, taking one on first
// use, and returns the body, valid until the connection's next request.
func (h *httpLoad) get(ctx context.Context, s *session, path string) ([]byte, error) {
	if s.conn == nil {
		c, err := h.pool.take(ctx)
		if err != nil {
			return nil, err
		}
		h.mu.Lock()
		h.held = append(h.held, c)
		h.mu.Unlock()
		s.conn = c
	}
	return s.conn.get(path)
}

// release makes every connection idle again, once the sessions holding them
// are over, so a run of many slices keeps one connection per client.
func (h *httpLoad) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.held {
		h.pool.put(c)
	}
	h.held = nil
}

// close closes every connection the generator dialed.
func (h *httpLoad) close() {
	h.release()
	h.pool.close()
}

// requestTimeout bounds one request of the load generator.
const requestTimeout = 30 * time.Second

// get requests path and returns the body, valid until the next call.
func (c *httpConn) get(path string) ([]byte, error) {
	// A stalled server fails the run instead of hanging it.
	if err := c.send("GET", path, nil, time.Now().Add(requestTimeout)); err != nil {
		return nil, err
	}
	return c.readOK()
}

// do sends one request with body (none if nil) and returns the response's
// status and body, valid until the next call; the whole exchange must end
// by deadline. A response that closes the connection sets c.closed.
func (c *httpConn) do(method, path string, body []byte, deadline time.Time) (int, []byte, error) {
	if err := c.send(method, path, body, deadline); err != nil {
		return 0, nil, err
	}
	return c.readResponse()
}

// send writes one request.
func (c *httpConn) send(method, path string, body []byte, deadline time.Time) error {
	c.req = append(c.req[:0], method...)
	c.req = append(c.req, ' ')
	c.req = append(c.req, path...)
	c.req = append(c.req, " HTTP/1.1\r\nHost: feed\r\n"...)
	if body != nil {
		c.req = append(c.req, "Content-Type: application/json\r\nContent-Length: "...)
		c.req = strconv.AppendInt(c.req, int64(len(body)), 10)
		c.req = append(c.req, "\r\n"...)
	}
	c.req = append(c.req, "\r\n"...)
	c.req = append(c.req, body...)
	if err := c.c.SetDeadline(deadline); err != nil {
		return err
	}
	_, err := c.c.Write(c.req)
	return err
}

// readOK reads one response and fails unless its status is 200 and the
// connection stays open.
func (c *httpConn) readOK() ([]byte, error) {
	code, body, err := c.readResponse()
	switch {
	case err != nil:
		return nil, err
	case code != 200:
		return nil, fmt.Errorf("status %d: %s", code, body)
	case c.closed:
		return nil, errors.New("the server closed a keep-alive connection")
	}
	return body, nil
}

// readResponse reads one response, framed by Content-Length or chunked,
// and returns its status and body.
func (c *httpConn) readResponse() (int, []byte, error) {
	status, err := c.line()
	if err != nil {
		return 0, nil, err
	}
	if len(status) < 12 || !bytes.HasPrefix(status, []byte("HTTP/1.1 ")) {
		return 0, nil, fmt.Errorf("bad status line %q", status)
	}
	code, err := strconv.Atoi(string(status[9:12]))
	if err != nil {
		return 0, nil, fmt.Errorf("bad status line %q", status)
	}
	length, chunked := -1, false
	for {
		line, err := c.line()
		if err != nil {
			return 0, nil, err
		}
		if len(line) == 0 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return 0, nil, fmt.Errorf("bad header line %q", line)
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if length, err = strconv.Atoi(string(value)); err != nil {
				return 0, nil, fmt.Errorf("bad Content-Length %q", value)
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			chunked = bytes.EqualFold(value, []byte("chunked"))
		case bytes.EqualFold(name, []byte("Connection")):
			c.closed = bytes.EqualFold(value, []byte("close"))
		}
	}
	c.buf = c.buf[:0]
	switch {
	case code == 204 || code == 304:
		// No body, whatever the headers say (RFC 9112, 6.3).
	case chunked:
		err = c.readChunks()
	case length >= 0:
		err = c.readN(length)
	default:
		err = errors.New("response without Content-Length or chunked encoding")
	}
	if err != nil {
		return 0, nil, err
	}
	return code, c.buf, nil
}

// line returns the next CRLF-terminated line without its terminator.
func (c *httpConn) line() ([]byte, error) {
	line, err := c.r.ReadSlice('\n')
	if err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r")), nil
}

func (c *httpConn) readN(n int) error {
	start := len(c.buf)
	c.buf = append(c.buf, make([]byte, n)...)
	_, err := io.ReadFull(c.r, c.buf[start:])
	return err
}

func (c *httpConn) readChunks() error {
	for {
		line, err := c.line()
		if err != nil {
			return err
		}
		size, _, _ := bytes.Cut(line, []byte(";"))
		n, err := strconv.ParseUint(string(size), 16, 32)
		if err != nil {
			return fmt.Errorf("bad chunk size %q", line)
		}
		if n == 0 {
			// Trailers (none expected) end with an empty line.
			for {
				if line, err = c.line(); err != nil || len(line) == 0 {
					return err
				}
			}
		}
		if err := c.readN(int(n)); err != nil {
			return err
		}
		if line, err = c.line(); err != nil {
			return err
		} else if len(line) != 0 {
			return fmt.Errorf("chunk not followed by CRLF")
		}
	}
}

// scanPage finds a feed page's next_cursor ("" for null) and counts its
// items by their content_id keys, without decoding the items.
func scanPage(body []byte) (next string, items int, err error) {
	const key = `"next_cursor":`
	i := bytes.LastIndex(body, []byte(key))
	if i < 0 || !bytes.HasPrefix(body, []byte(`{"items":[`)) {
		return "", 0, fmt.Errorf("not a feed page: %.200q", body)
	}
	items = bytes.Count(body[:i], []byte(`"content_id":`))
	rest := body[i+len(key):]
	switch {
	case bytes.HasPrefix(rest, []byte("null")):
		return "", items, nil
	case bytes.HasPrefix(rest, []byte(`"`)):
		end := bytes.IndexByte(rest[1:], '"')
		if end <= 0 {
			return "", 0, fmt.Errorf("bad next_cursor in %.200q", body)
		}
		return string(rest[1 : 1+end]), items, nil
	}
	return "", 0, fmt.Errorf("bad next_cursor in %.200q", body)
}
