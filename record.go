package feed

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
)

// KindPattern is what a post kind must match: a lower-case ascii identifier.
var KindPattern = regexp.MustCompile(`^[a-z0-9_]{1,32}$`)

// Record types: the lines of an import or export file (JSON Lines), one
// fact of a deployment each.
const (
	RecordFollow = "follow" // UserID follows AuthorID (FollowedAt optional)
	RecordPost   = "post"   // AuthorID published ContentID at PublishTime
	RecordMute   = "mute"   // UserID mutes AuthorID
	RecordHide   = "hide"   // AuthorID hides their posts from UserID
	RecordMarker = "marker" // UserID's read marker is at (PublishTime, ContentID)
)

// Record is one line of an import or export file. The fields a type does
// not use are zero.
type Record struct {
	Type        string
	UserID      uint64
	AuthorID    uint64
	ContentID   uint64
	PublishTime int64
	Kind        string
	FollowedAt  int64 // follow only; 0: when the import runs
}

// recordFields are the members each record type takes, and which of them
// it requires.
var recordFields = map[string]map[string]bool{
	RecordFollow: {"user_id": true, "author_id": true, "followed_at": false},
	RecordPost:   {"author_id": true, "content_id": true, "publish_time": true, "kind": false},
	RecordMute:   {"user_id": true, "author_id": true},
	RecordHide:   {"user_id": true, "author_id": true},
	RecordMarker: {"user_id": true, "content_id": true, "publish_time": true},
}

// ParseRecord decodes and checks one line by the API's rules: ids are
// decimal strings or JSON integers in 1..2^64-1, times Unix milliseconds
// from 0 to maxTime, kinds match KindPattern (a post without one is a
// KindPost), a user does not follow, mute or hide from themselves, and
// every member is one the type takes. The error is an EINVALID *Error.
func ParseRecord(line []byte, maxTime int64) (Record, error) {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(line, &members); err != nil || members == nil {
		return Record{}, Errorf(EINVALID, "not a JSON object")
	}
	var r Record
	if err := json.Unmarshal(members["type"], &r.Type); err != nil || r.Type == "" {
		return r, Errorf(EINVALID, "type must be one of follow, post, mute, hide, marker")
	}
	fields, ok := recordFields[r.Type]
	if !ok {
		return r, Errorf(EINVALID, "type must be one of follow, post, mute, hide, marker")
	}
	for name := range members {
		if _, ok := fields[name]; !ok && name != "type" {
			return r, Errorf(EINVALID, "a %s record has no field %q", r.Type, truncate(name, 64))
		}
	}
	for name, required := range fields {
		raw, ok := members[name]
		if !ok || bytes.Equal(raw, []byte("null")) {
			if required {
				return r, Errorf(EINVALID, "%s is required in a %s record", name, r.Type)
			}
			continue
		}
		if err := r.set(name, raw, maxTime); err != nil {
			return r, err
		}
	}
	if r.Type == RecordPost && r.Kind == "" {
		r.Kind = KindPost
	}
	if r.UserID != 0 && r.UserID == r.AuthorID {
		return r, Errorf(EINVALID, "user_id and author_id must differ in a %s record", r.Type)
	}
	return r, nil
}

func (r *Record) set(name string, raw json.RawMessage, maxTime int64) error {
	switch name {
	case "user_id":
		return parseRecordID(name, raw, &r.UserID)
	case "author_id":
		return parseRecordID(name, raw, &r.AuthorID)
	case "content_id":
		return parseRecordID(name, raw, &r.ContentID)
	case "publish_time":
		return parseRecordTime(name, raw, maxTime, &r.PublishTime)
	case "followed_at":
		return parseRecordTime(name, raw, maxTime, &r.FollowedAt)
	case "kind":
		if err := json.Unmarshal(raw, &r.Kind); err != nil || !KindPattern.MatchString(r.Kind) {
			return Errorf(EINVALID, "kind must be a string matching %s", KindPattern)
		}
	}
	return nil
}

func parseRecordID(name string, raw json.RawMessage, dst *uint64) error {
	s := string(raw)
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		s = s[1 : len(s)-1]
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n == 0 {
		return Errorf(EINVALID, "%s must be a decimal string or integer in 1..18446744073709551615", name)
	}
	*dst = n
	return nil
}

func parseRecordTime(name string, raw json.RawMessage, maxTime int64, dst *int64) error {
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil || n < 0 || n > maxTime {
		return Errorf(EINVALID, "%s must be an integer of Unix milliseconds in 0..%d", name, maxTime)
	}
	*dst = n
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// AppendJSON appends the record as one JSON object, ids as decimal strings,
// without a newline: the form export writes and import reads.
func (r Record) AppendJSON(b []byte) []byte {
	b = append(b, `{"type":`...)
	b = strconv.AppendQuote(b, r.Type)
	id := func(name string, v uint64) {
		b = append(b, `,"`...)
		b = append(b, name...)
		b = append(b, `":"`...)
		b = strconv.AppendUint(b, v, 10)
		b = append(b, '"')
	}
	num := func(name string, v int64) {
		b = append(b, `,"`...)
		b = append(b, name...)
		b = append(b, `":`...)
		b = strconv.AppendInt(b, v, 10)
	}
	switch r.Type {
	case RecordFollow:
		id("user_id", r.UserID)
		id("author_id", r.AuthorID)
		if r.FollowedAt != 0 {
			num("followed_at", r.FollowedAt)
		}
	case RecordPost:
		id("author_id", r.AuthorID)
		id("content_id", r.ContentID)
		num("publish_time", r.PublishTime)
		b = append(b, `,"kind":`...)
		b = strconv.AppendQuote(b, r.Kind)
	case RecordMute, RecordHide:
		id("user_id", r.UserID)
		id("author_id", r.AuthorID)
	case RecordMarker:
		id("user_id", r.UserID)
		id("content_id", r.ContentID)
		num("publish_time", r.PublishTime)
	default:
		panic(fmt.Sprintf("feed: record type %q", r.Type))
	}
	return append(b, '}')
}
