package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
)

// mixPost is a post as the API acknowledged it.
type mixPost struct {
	ID   uint64
	Time int64
}

// newer orders posts as a feed does: publish_time, then content_id,
// descending.
func newer(a, b mixPost) int {
	if c := cmp.Compare(b.Time, a.Time); c != 0 {
		return c
	}
	return cmp.Compare(b.ID, a.ID)
}

// parsePost reads a post the API returned.
func parsePost(body []byte) (mixPost, error) {
	var p struct {
		ContentID   string `json:"content_id"`
		PublishTime int64  `json:"publish_time"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		return mixPost{}, fmt.Errorf("not a post: %.200q", body)
	}
	id, err := strconv.ParseUint(p.ContentID, 10, 64)
	if err != nil {
		return mixPost{}, fmt.Errorf("bad content_id in %.200q", body)
	}
	return mixPost{ID: id, Time: p.PublishTime}, nil
}

// mixState is what the API acknowledged of one target's graph and posts
// during phase O, which the check at the end compares feeds with, and
// what the mix draws its operations from. Follows and unfollows of one
// user are never in flight together, nor two deletes of one post, so the
// acknowledged state is the stored one; a write whose outcome is unknown
// (an error, a timeout) makes its user or author uncertain, and the check
// leaves the feeds it touches out.
type mixState struct {
	mu        sync.Mutex
	g         *mixGraph
	following []map[int]bool // by user index
	posts     [][]mixPost    // by author index: acknowledged, not deleted
	busy      []bool         // a follow or unfollow of the user is in flight
	uncertain []bool         // by user: followees or posts unknown
	cursors   map[int]string // the next_cursor of each user's last page
	withCur   []int          // users with a cursor, for drawing one
}

func newMixState(g *mixGraph, seeds [][]mixPost) *mixState {
	posts := make([][]mixPost, len(seeds)) // each target's own: published appends
	for u, ps := range seeds {
		posts[u] = slices.Clone(ps)
	}
	s := &mixState{g: g, following: make([]map[int]bool, len(g.users)), posts: posts,
		busy: make([]bool, len(g.users)), uncertain: make([]bool, len(g.users)), cursors: map[int]string{}}
	for u, fs := range g.followees {
		s.following[u] = map[int]bool{}
		for _, a := range fs {
			s.following[u][a] = true
		}
	}
	return s
}

// cursor draws a user with a saved cursor: ok false if none has one.
func (s *mixState) cursor(rng *rand.Rand) (user int, cursor string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.withCur) > 0 {
		i := rng.IntN(len(s.withCur))
		u := s.withCur[i]
		if c, ok := s.cursors[u]; ok {
			return u, c, true
		}
		s.withCur[i] = s.withCur[len(s.withCur)-1]
		s.withCur = s.withCur[:len(s.withCur)-1]
	}
	return 0, "", false
}

// setCursor saves the user's next_cursor ("" at the end of the feed).
func (s *mixState) setCursor(user int, next string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if next == "" {
		delete(s.cursors, user)
		return
	}
	if _, had := s.cursors[user]; !had {
		s.withCur = append(s.withCur, user)
	}
	s.cursors[user] = next
}

// popularAuthor draws an author with probability proportional to the
// built follower counts (new follows go where the graph's went).
func (s *mixState) popularAuthor(rng *rand.Rand) int {
	total := 0
	for _, n := range s.g.followers {
		total += n
	}
	x := rng.IntN(total)
	for a, n := range s.g.followers {
		if x < n {
			return a
		}
		x -= n
	}
	return len(s.g.followers) - 1
}

// startFollowChange picks, for a follow (follow true) or an unfollow, a
// user with none in flight and an author they do not follow (or follow),
// and marks the user busy; ok false if the draws found none.
func (s *mixState) startFollowChange(rng *rand.Rand, follow bool) (user, author int, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range 20 {
		u := rng.IntN(len(s.g.users))
		if s.busy[u] {
			continue
		}
		if follow {
			a := s.popularAuthor(rng)
			if a == u || s.following[u][a] {
				continue
			}
			s.busy[u] = true
			return u, a, true
		}
		if len(s.following[u]) == 0 {
			continue
		}
		// Map order is not random enough to draw from; take the k-th.
		k := rng.IntN(len(s.following[u]))
		for a := range s.following[u] {
			if k == 0 {
				s.busy[u] = true
				return u, a, true
			}
			k--
		}
	}
	return 0, 0, false
}

// endFollowChange records the outcome of a follow or unfollow: applied
// when ok, unknown otherwise.
func (s *mixState) endFollowChange(user, author int, follow, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.busy[user] = false
	switch {
	case !ok:
		s.uncertain[user] = true
	case follow:
		s.following[user][author] = true
	default:
		delete(s.following[user], author)
	}
}

// published records an acknowledged post, or, when ok is false, that the
// author's posts are unknown.
func (s *mixState) published(author int, p mixPost, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !ok {
		s.uncertain[author] = true
		return
	}
	s.posts[author] = append(s.posts[author], p)
}

// takePost draws a post to delete and removes it from the state (a failed
// delete makes its author uncertain).
func (s *mixState) takePost(rng *rand.Rand) (author int, p mixPost, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range 20 {
		a := rng.IntN(len(s.posts))
		if n := len(s.posts[a]); n > 0 {
			i := rng.IntN(n)
			p = s.posts[a][i]
			s.posts[a] = slices.Delete(s.posts[a], i, i+1)
			return a, p, true
		}
	}
	return 0, mixPost{}, false
}

// uncertainAuthor marks an author's posts unknown.
func (s *mixState) uncertainAuthor(a int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.uncertain[a] = true
}

// follower returns a user who follows author, drawn at random, and whose
// follows are not changing; ok false if none.
func (s *mixState) follower(rng *rand.Rand, author int) (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var fs []int
	for u, f := range s.following {
		if f[author] && !s.busy[u] {
			fs = append(fs, u)
		}
	}
	if len(fs) == 0 {
		return 0, false
	}
	return fs[rng.IntN(len(fs))], true
}

// expectedFirstPage is the first page of limit items a full sort of the
// user's feed gives: the user's own posts and those of the authors they
// follow, newest first. ok is false when the user or one of the authors is
// uncertain.
func (s *mixState) expectedFirstPage(user, limit int) (page []mixPost, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.uncertain[user] {
		return nil, false
	}
	all := slices.Clone(s.posts[user])
	for a := range s.following[user] {
		if s.uncertain[a] {
			return nil, false
		}
		all = append(all, s.posts[a]...)
	}
	slices.SortFunc(all, newer)
	return all[:min(limit, len(all))], true
}
