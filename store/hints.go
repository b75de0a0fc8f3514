package store

import "sync/atomic"

// userHints remembers users lossily: what a read guesses from the user's
// last page, where a wrong or lost hint costs a statement, never a row. A
// shard's pullHints are the users whose header said they pull: their pages
// go straight to feedPagePullSQL instead of finding out with feedPageSQL
// first. Two slots per hash (neighbours, one cache line) keep collisions
// rare. The store's deepReaders are the users whose last page went below
// their inbox, whose next page most likely does too (ReadsDeep).
type userHints [1 << 16]atomic.Uint64

func (h *userHints) slots(userID uint64) (*atomic.Uint64, *atomic.Uint64) {
	i := (userID * 0x9E3779B97F4A7C15) >> (64 - 16)
	return &h[i], &h[i^1]
}

// Has says whether the user is remembered.
func (h *userHints) Has(userID uint64) bool {
	a, b := h.slots(userID)
	return a.Load() == userID || b.Load() == userID
}

// Set remembers the user, or forgets it.
func (h *userHints) Set(userID uint64, on bool) {
	a, b := h.slots(userID)
	switch {
	case !on:
		a.CompareAndSwap(userID, 0)
		b.CompareAndSwap(userID, 0)
	case a.Load() == userID || b.Load() == userID:
	case b.Load() == 0:
		b.Store(userID)
	default:
		a.Store(userID)
	}
}

// ReadsDeep says whether the user's last page went below the inbox, as far
// as this process remembers: its next page most likely does too, and what
// that page starts from may be read meanwhile (LearnAhead).
func (s *Store) ReadsDeep(userID uint64) bool { return s.deepReaders.Has(userID) }

// SetReadsDeep remembers whether the user's last page went below the inbox.
func (s *Store) SetReadsDeep(userID uint64, deep bool) { s.deepReaders.Set(userID, deep) }
