package service

import (
	"context"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/store"
)

// PublishInput is a publish request; zero ContentID and nil PublishTime ask
// the server to assign them, empty Kind means feed.KindPost.
type PublishInput struct {
	AuthorID    uint64
	ContentID   uint64
	PublishTime *int64
	Kind        string
}

// Publish stores a post and queues its fan-out; the author's own feed shows
// it when Publish returns. Publishing the same post again returns it with
// created=false.
//
// Returns EINVALID for a bad kind or a publish_time beyond the clock-skew
// allowance, ECONFLICT if the content id names another or a deleted post.
func (s *Service) Publish(ctx context.Context, in PublishInput) (feed.Post, bool, error) {
	ctx = store.WithClass(ctx, store.Writes)
	now := s.now()
	if in.Kind == "" {
		in.Kind = feed.KindPost
	}
	if !feed.KindPattern.MatchString(in.Kind) {
		return feed.Post{}, false, feed.Errorf(feed.EINVALID, "kind must match %s", feed.KindPattern)
	}
	p := feed.Post{AuthorID: in.AuthorID, ContentID: in.ContentID, Kind: in.Kind, PublishTime: now.UnixMilli()}
	if in.PublishTime != nil {
		p.PublishTime = *in.PublishTime
		if p.PublishTime < 0 || p.PublishTime > now.Add(s.cfg.ClockSkew).UnixMilli() {
			return feed.Post{}, false, feed.Errorf(feed.EINVALID,
				"publish_time must be Unix milliseconds between 0 and now + %s", s.cfg.ClockSkew)
		}
	}
	if in.ContentID != 0 {
		stored, created, err := s.store.PublishPost(ctx, p, now.UnixMilli())
		if err != nil || created {
			return s.published(stored, created, err)
		}
		if stored.AuthorID != p.AuthorID || stored.Kind != p.Kind || (in.PublishTime != nil && stored.PublishTime != p.PublishTime) {
			return feed.Post{}, false, feed.Errorf(feed.ECONFLICT, "content_id %d exists with other fields", in.ContentID)
		}
		return stored, false, nil
	}
	// A server-assigned id that collides (two nodes drew the same node id)
	// is drawn again, whether it collided with a live post or a deleted
	// one: the client chose neither.
	for range 3 {
		p.ContentID = s.homeID(p.AuthorID)
		stored, created, err := s.store.PublishPost(ctx, p, now.UnixMilli())
		if feed.ErrorCode(err) == feed.ECONFLICT {
			continue
		}
		if err != nil || created {
			return s.published(stored, created, err)
		}
	}
	return feed.Post{}, false, feed.Errorf(feed.EUNAVAILABLE, "could not assign a unique content id")
}

// maxIDDraws bounds the ids homeID draws: with n databases a draw lands on
// the author's with probability about 1/n.
const maxIDDraws = 256

// homeID draws a server-assigned content id that lives on the author's own
// database, so that claiming it is part of the post's transaction there and
// a publish needs no other database (one that is down cannot fail it). With
// more databases than maxIDDraws can find, the last draw is used; its claim
// then goes to its own database.
func (s *Service) homeID(authorID uint64) uint64 {
	home := s.store.ShardOf(authorID)
	id := s.ids.next()
	for range maxIDDraws - 1 {
		if s.store.ShardOf(id) == home {
			break
		}
		id = s.ids.next()
	}
	return id
}

func (s *Service) published(p feed.Post, created bool, err error) (feed.Post, bool, error) {
	if err == nil {
		s.forget(p.AuthorID)
		s.metrics.postsPublished.Inc()
		s.wake.notify(planQueue)
	}
	return p, created, err
}

// DeletePost deletes a post and queues its removal from every feed.
// Deleting it again does nothing.
//
// Returns ENOTFOUND if the author never published it.
func (s *Service) DeletePost(ctx context.Context, authorID, contentID uint64) error {
	ctx = store.WithClass(ctx, store.Writes)
	if err := s.store.DeletePost(ctx, authorID, contentID); err != nil {
		return err
	}
	s.forget(authorID)
	s.wake.notify(planQueue)
	return nil
}

// ListPosts returns a page of the author's live posts, newest first.
//
// Returns EINVALID for a malformed cursor or page size.
func (s *Service) ListPosts(ctx context.Context, authorID uint64, page feed.Page) ([]feed.Post, string, error) {
	ctx = store.WithClass(ctx, store.Reads)
	if err := checkPage(page); err != nil {
		return nil, "", err
	}
	before, err := decodeCursor(cursorPosts, page.Cursor, store.Top)
	if err != nil {
		return nil, "", err
	}
	posts, err := s.store.ListPosts(ctx, authorID, before, page.Limit+1)
	if err != nil {
		return nil, "", err
	}
	return pageOf(posts, page.Limit, func(p feed.Post) string { return encodeCursor(cursorPosts, p.Key()) })
}

// forget drops the author's cached outbox after a local write.
func (s *Service) forget(authorID uint64) {
	s.store.ForgetOutbox(authorID)
}
