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
	ok = s.object(func(key string) (field int, ok bool) {
		switch key {
		case "items":
			p.Items = make([]Post, 0, max(0, min(limit, maxItemsHint)))
			return 0, s.array(func() bool {
				it, ok := s.post()
				p.Items = append(p.Items, it)
				return ok
			})
		case "next_cursor":
			p.NextCursor, ok = s.nullableStr()
			return 1, ok
		case "top_cursor":
			p.TopCursor, ok = s.nullableStr()
			return 2, ok
		case "partial":
			p.Partial, ok = s.boolean()
			return 3, ok
		case "missing_authors":
			p.MissingAuthors = []string{}
			return 4, s.array(func() bool {
				a, ok := s.str()
				p.MissingAuthors = append(p.MissingAuthors, a)
				return ok
			})
		}
		return -1, false
	})
	s.byte('\n')
	return p, ok && s.i == len(s.s)
}

// post reads an item of a page of posts.
func (s *scanner) post() (p Post, ok bool) {
	ok = s.object(func(key string) (field int, ok bool) {
		switch key {
		case "content_id":
			p.ContentID, ok = s.str()
			return 0, ok
		case "author_id":
			p.AuthorID, ok = s.str()
			return 1, ok
		case "publish_time":
			p.PublishTime, ok = s.int64()
			return 2, ok
		case "kind":
			p.Kind, ok = s.str()
			return 3, ok
		}
		return -1, false
	})
	return p, ok
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

// nullableStr reads null (nil) or a string as str does.
func (s *scanner) nullableStr() (*string, bool) {
	if s.null() {
		return nil, true
	}
	v, ok := s.str()
	return &v, ok
}

// object reads an object, each member's value by member, which returns the
// key's field number (-1: a key it does not read) and whether it read the
// value. An unknown key or one met twice fails the read.
func (s *scanner) object(member func(key string) (field int, ok bool)) bool {
	var seen uint64
	if !s.byte('{') {
		return false
	}
	for first := true; !s.byte('}'); first = false {
		if !first && !s.byte(',') {
			return false
		}
		key, ok := s.str()
		if !ok || !s.byte(':') {
			return false
		}
		field, ok := member(key)
		if field < 0 || !ok || seen&(1<<field) != 0 {
			return false
		}
		seen |= 1 << field
	}
	return true
}

// array reads an array, each element by elem.
func (s *scanner) array(elem func() bool) bool {
	if !s.byte('[') {
		return false
	}
	for first := true; !s.byte(']'); first = false {
		if !first && !s.byte(',') {
			return false
		}
		if !elem() {
			return false
		}
	}
	return true
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
