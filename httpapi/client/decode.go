package client

import (
	"encoding/json"
	"strconv"
)

// pageBody is the answer of a page of up to limit items.
type pageBody[T any] struct {
	page  *Page[T]
	limit int
}

// maxItemsHint bounds the room made for a page's items before parsing it:
// the contract's largest page.
const maxItemsHint = 100

// decode decodes the page. A page of posts as the server writes it
// (compact, strings without escapes) is parsed by hand into substrings of
// one copy of the body; anything else, and any doubt, goes to
// encoding/json, whose result the hand parser gives wherever it accepts the
// input. Feed pages are the client's most frequent answer, and reflection
// was most of its cost.
func (b pageBody[T]) decode(data []byte) error {
	if pp, ok := any(b.page).(*Page[Post]); ok {
		if page, ok := parsePostPage(data, b.limit); ok {
			*pp = page
			return nil
		}
	}
	return json.Unmarshal(data, b.page)
}

// parsePostPage parses a page of posts with room for limit items; ok is
// false for anything outside the narrow form it reads.
func parsePostPage(data []byte, limit int) (p Page[Post], ok bool) {
	s := scanner{s: string(data)}
	var seen [5]bool
	if !s.byte('{') {
		return p, false
	}
	for first := true; !s.byte('}'); first = false {
		if !first && !s.byte(',') {
			return p, false
		}
		key, ok := s.str()
		if !ok || !s.byte(':') {
			return p, false
		}
		field := -1
		switch key {
		case "items":
			field, ok = 0, s.byte('[')
			p.Items = make([]Post, 0, max(0, min(limit, maxItemsHint)))
			for more := ok && !s.byte(']'); more; more = !s.byte(']') {
				if len(p.Items) > 0 && !s.byte(',') {
					return p, false
				}
				var it Post
				if it, ok = s.post(); !ok {
					return p, false
				}
				p.Items = append(p.Items, it)
			}
		case "next_cursor":
			field, p.NextCursor, ok = 1, nil, true
			if !s.null() {
				p.NextCursor, ok = s.strPtr()
			}
		case "top_cursor":
			field, p.TopCursor, ok = 2, nil, true
			if !s.null() {
				p.TopCursor, ok = s.strPtr()
			}
		case "partial":
			field = 3
			p.Partial, ok = s.boolean()
		case "missing_authors":
			field, ok = 4, s.byte('[')
			p.MissingAuthors = []string{}
			for more := ok && !s.byte(']'); more; more = !s.byte(']') {
				if len(p.MissingAuthors) > 0 && !s.byte(',') {
					return p, false
				}
				var a string
				if a, ok = s.str(); !ok {
					return p, false
				}
				p.MissingAuthors = append(p.MissingAuthors, a)
			}
		}
		if field < 0 || !ok || seen[field] {
			return p, false
		}
		seen[field] = true
	}
	s.byte('\n')
	return p, s.i == len(s.s)
}

// scanner reads JSON tokens from s without whitespace between them.
type scanner struct {
	s string
	i int
}

// byte consumes c if it comes next.
func (s *scanner) byte(c byte) bool {
	if s.i < len(s.s) && s.s[s.i] == c {
		s.i++
		return true
	}
	return false
}

func (s *scanner) literal(lit string) bool {
	if len(s.s)-s.i >= len(lit) && s.s[s.i:s.i+len(lit)] == lit {
		s.i += len(lit)
		return true
	}
	return false
}

func (s *scanner) null() bool { return s.literal("null") }

func (s *scanner) boolean() (v, ok bool) {
	if s.literal("true") {
		return true, true
	}
	return false, s.literal("false")
}

// str reads a string of printable ASCII without escapes.
func (s *scanner) str() (string, bool) {
	if !s.byte('"') {
		return "", false
	}
	start := s.i
	for ; s.i < len(s.s); s.i++ {
		switch c := s.s[s.i]; {
		case c == '"':
			s.i++
			return s.s[start : s.i-1], true
		case c < 0x20 || c > 0x7e || c == '\\':
			return "", false
		}
	}
	return "", false
}

func (s *scanner) strPtr() (*string, bool) {
	v, ok := s.str()
	return &v, ok
}

// int64 reads an integer in JSON's grammar (no leading zeros, no
// fraction or exponent) that fits an int64.
func (s *scanner) int64() (int64, bool) {
	start := s.i
	s.byte('-')
	digits := s.i
	for s.i < len(s.s) && s.s[s.i] >= '0' && s.s[s.i] <= '9' {
		s.i++
	}
	if s.i == digits || (s.s[digits] == '0' && s.i > digits+1) {
		return 0, false
	}
	n, err := strconv.ParseInt(s.s[start:s.i], 10, 64)
	return n, err == nil
}

// post reads an item of a page of posts.
func (s *scanner) post() (p Post, ok bool) {
	var seen [4]bool
	if !s.byte('{') {
		return p, false
	}
	for first := true; !s.byte('}'); first = false {
		if !first && !s.byte(',') {
			return p, false
		}
		key, ok := s.str()
		if !ok || !s.byte(':') {
			return p, false
		}
		field := -1
		switch key {
		case "content_id":
			field = 0
			p.ContentID, ok = s.str()
		case "author_id":
			field = 1
			p.AuthorID, ok = s.str()
		case "publish_time":
			field = 2
			p.PublishTime, ok = s.int64()
		case "kind":
			field = 3
			p.Kind, ok = s.str()
		}
		if field < 0 || !ok || seen[field] {
			return p, false
		}
		seen[field] = true
	}
	return p, true
}
