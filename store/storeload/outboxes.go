package storeload

import (
	"context"
	"fmt"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/store"
	"github.com/feedhq/feed/store/sqlconn"
)

// Loads for readers of many authors: deep scrolls need thousands of
// followed outboxes, which publishing and following one by one through the
// service would take minutes to build.

const (
	importPostsHead      = `INSERT INTO posts (author_id, publish_time, content_id, kind, created_at)`
	importDeliveriesHead = `INSERT INTO deliveries (content_id, author_id, publish_time, kind, state, recipients, delivered, created_at)`
	importInboxHead      = `INSERT IGNORE INTO inbox (user_id, publish_time, content_id, author_id, kind)`
	importAuthorsHead    = `INSERT INTO authors (author_id, follower_count)`
	importAuthorsTail    = ` ON DUPLICATE KEY UPDATE follower_count = follower_count + VALUES(follower_count)`
)

// deliveryDone is deliveries.state of a finished fan-out.
const deliveryDone = 2

// Posts stores posts as published and fanned out at createdAt: the
// posts rows and their finished deliveries (so they can be deleted through
// the service), nothing in any inbox; Inbox writes inbox entries.
func Posts(ctx context.Context, st *store.Store, posts []feed.Post, createdAt int64) error {
	byShard := map[*store.Shard][]feed.Post{}
	for _, p := range posts {
		sh := st.ShardOf(p.AuthorID)
		byShard[sh] = append(byShard[sh], p)
	}
	for sh, ps := range byShard {
		if _, err := sqlconn.InsertRows(ctx, sh.DB, importPostsHead, 5, "", len(ps), func(i int) []any {
			return []any{ps[i].AuthorID, ps[i].PublishTime, ps[i].ContentID, ps[i].Kind, createdAt}
		}); err != nil {
			return fmt.Errorf("storeload: posts: %w", err)
		}
		if _, err := sqlconn.InsertRows(ctx, sh.DB, importDeliveriesHead, 8, "", len(ps), func(i int) []any {
			return []any{ps[i].ContentID, ps[i].AuthorID, ps[i].PublishTime, ps[i].Kind, deliveryDone, 0, 0, createdAt}
		}); err != nil {
			return fmt.Errorf("storeload: posts: %w", err)
		}
	}
	return nil
}

// Following makes the user follow authors it has no history with, as
// applied follows leave it: the edges, the authors' followers rows and
// their counts, and the user's header row. Nothing is backfilled.
func Following(ctx context.Context, st *store.Store, userID uint64, authors []uint64, followedAt int64) error {
	sh := st.ShardOf(userID)
	header := feed.Post{PublishTime: store.Top.PublishTime, ContentID: store.Top.ContentID}
	if err := Inbox(ctx, st, userID, []feed.Post{header}); err != nil {
		return err
	}
	if _, err := sqlconn.InsertRows(ctx, sh.DB, importFollowing, 4, "", len(authors), func(i int) []any {
		return []any{userID, authors[i], followedAt, 0}
	}); err != nil {
		return fmt.Errorf("storeload: following: %w", err)
	}
	if err := followsMoved(ctx, sh.DB, []uint64{userID}); err != nil {
		return fmt.Errorf("storeload: following: %w", err)
	}
	for ash, ids := range byShard(st, authors) {
		if _, err := sqlconn.InsertRows(ctx, ash.DB, importFollowers, 3, "", len(ids), func(i int) []any {
			return []any{ids[i], userID, followedAt}
		}); err != nil {
			return fmt.Errorf("storeload: following: %w", err)
		}
		if _, err := sqlconn.InsertRows(ctx, ash.DB, importAuthorsHead, 2, importAuthorsTail, len(ids), func(i int) []any {
			return []any{ids[i], 1}
		}); err != nil {
			return fmt.Errorf("storeload: following: %w", err)
		}
	}
	return nil
}

// Inbox writes entries into the user's inbox, as fan-out would have
// pushed them, leaving those it holds already; the floor is Activity's.
func Inbox(ctx context.Context, st *store.Store, userID uint64, posts []feed.Post) error {
	if _, err := sqlconn.InsertRows(ctx, st.ShardOf(userID).DB, importInboxHead, 5, "", len(posts), func(i int) []any {
		return []any{userID, posts[i].PublishTime, posts[i].ContentID, posts[i].AuthorID, posts[i].Kind}
	}); err != nil {
		return fmt.Errorf("storeload: inbox: %w", err)
	}
	return nil
}
