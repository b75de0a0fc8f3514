package service

import (
	"encoding/base64"
	"encoding/binary"

	"github.com/feedhq/feed"
)

// Cursor kinds: a cursor of one list is rejected by another.
const (
	cursorFeed      byte = 'f'
	cursorPosts     byte = 'p'
	cursorFollowing byte = 'g'
	cursorFollowers byte = 'r'
	cursorMuted     byte = 'm'
	cursorHidden    byte = 'h'
	// A live feed's cursor is the position (score, stream id) of the last
	// snapshot stream shown or, past the snapshot, the key of the last
	// replay shown.
	cursorLiveSnapshot byte = 's'
	cursorLiveReplays  byte = 'y'
)

const cursorVersion byte = 1

// A cursor is base64url(version, kind, publish_time, content_id): the keyset
// position of the last item a page returned. For the follow lists only the
// id is used, as for the mute and hide lists. It is opaque to clients and carries no server state, so any
// instance can continue any page.
const cursorLen = 2 + 8 + 8

func encodeCursor(kind byte, k feed.Key) string {
	var b [cursorLen]byte
	b[0], b[1] = cursorVersion, kind
	binary.BigEndian.PutUint64(b[2:], uint64(k.PublishTime))
	binary.BigEndian.PutUint64(b[10:], k.ContentID)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// cursorEncodedLen is the length of every cursor: 18 bytes are exactly 24
// base64 characters, with no padding and no spare bits.
var cursorEncodedLen = base64.RawURLEncoding.EncodedLen(cursorLen)

// decodeCursor parses a cursor of the given kind; "" is the start of the list.
// Only the canonical encoding is accepted (the decoder alone would also take
// line breaks anywhere in it), so one position has exactly one cursor.
//
// Returns EINVALID for anything else.
func decodeCursor(kind byte, s string, start feed.Key) (feed.Key, error) {
	if s == "" {
		return start, nil
	}
	if len(s) != cursorEncodedLen {
		return feed.Key{}, feed.Errorf(feed.EINVALID, "malformed cursor")
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) != cursorLen || b[0] != cursorVersion || b[1] != kind {
		return feed.Key{}, feed.Errorf(feed.EINVALID, "malformed cursor")
	}
	return feed.Key{
		PublishTime: int64(binary.BigEndian.Uint64(b[2:])),
		ContentID:   binary.BigEndian.Uint64(b[10:]),
	}, nil
}
