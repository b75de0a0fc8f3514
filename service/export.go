package service

import (
	"context"
	"time"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/store"
)

// An export is every fact of a deployment, or of some users, as the
// records of an import file (feed.Record): follows, mutes, hides, read
// markers and posts not deleted. Import reads the same records, in any
// order.

// exportPageSize is how many rows an export reads a statement.
const exportPageSize = 2000

// ExportTypes are the record types in the order Export writes them.
var ExportTypes = []string{feed.RecordFollow, feed.RecordMute, feed.RecordHide, feed.RecordMarker, feed.RecordPost}

// Export reads the records of the users and authors with ids in [lo, hi]
// from every database, each database once per record type: the follows,
// mutes, hides (by the reader's id) and markers of the users in the range
// and the posts of the authors in it. It calls emit with each page's
// records (the slice is reused after emit returns) and the rows the page
// read. The records come in the order of ExportTypes, each type in id
// order per database.
//
// Returns EINVALID for an empty range or one starting at 0.
func (s *Service) Export(ctx context.Context, lo, hi uint64, emit func(recs []feed.Record, rows int) error) error {
	if lo == 0 || lo > hi {
		return feed.Errorf(feed.EINVALID, "the range of user ids must be lo-hi with 1 <= lo <= hi")
	}
	for _, typ := range ExportTypes {
		for _, sh := range s.store.Shards() {
			if err := s.store.Export(ctx, sh, typ, lo, hi, exportPageSize, emit); err != nil {
				return err
			}
		}
	}
	return nil
}

// ExportEstimate is the servers' estimate of the rows an export of every
// id reads (table statistics, no scan): for a progress bar.
func (s *Service) ExportEstimate(ctx context.Context) (int64, error) {
	return s.store.ExportEstimate(ctx, ExportTypes)
}

// ExportUser calls emit with one user's records, a page at a time, each
// page read within pageTimeout: the user's follows, mutes, the hides the
// user gives as an author (the author's list, hidden_from, which trails a
// hide by the time its follow event takes), the read marker and the user's
// posts not deleted, newest first. The hides others give the user are
// theirs, not the user's. The slice emit gets is reused after it returns.
func (s *Service) ExportUser(ctx context.Context, userID uint64, pageTimeout time.Duration, emit func([]feed.Record) error) error {
	ctx = store.WithClass(ctx, store.Reads)
	var recs []feed.Record
	within := func(read func(ctx context.Context) error) error {
		rctx, cancel := context.WithTimeout(ctx, pageTimeout)
		defer cancel()
		err := read(rctx)
		if err != nil && ctx.Err() == nil && rctx.Err() != nil {
			return feed.Errorf(feed.EUNAVAILABLE, "the database did not answer within the read deadline")
		}
		return err
	}
	steps := []func() error{
		func() error {
			return exportPages(within, emit, &recs, func(ctx context.Context, after feed.Follow) ([]feed.Follow, error) {
				return s.store.ListFollowing(ctx, userID, after.AuthorID, exportPageSize)
			}, func(f feed.Follow) feed.Record {
				return feed.Record{Type: feed.RecordFollow, UserID: f.UserID, AuthorID: f.AuthorID, FollowedAt: f.FollowedAt}
			})
		},
		func() error {
			return exportPages(within, emit, &recs, func(ctx context.Context, after feed.Mute) ([]feed.Mute, error) {
				return s.store.ListMuted(ctx, userID, after.AuthorID, exportPageSize)
			}, func(m feed.Mute) feed.Record {
				return feed.Record{Type: feed.RecordMute, UserID: m.UserID, AuthorID: m.AuthorID}
			})
		},
		func() error {
			return exportPages(within, emit, &recs, func(ctx context.Context, after feed.Mute) ([]feed.Mute, error) {
				return s.store.ListHiddenFrom(ctx, userID, after.UserID, exportPageSize)
			}, func(m feed.Mute) feed.Record {
				return feed.Record{Type: feed.RecordHide, UserID: m.UserID, AuthorID: m.AuthorID}
			})
		},
		func() error {
			var m store.Marker
			ok := false
			err := within(func(ctx context.Context) (err error) {
				m, ok, err = s.store.GetMarker(ctx, userID)
				return err
			})
			if err != nil || !ok {
				return err
			}
			return emit(append(recs[:0], feed.Record{Type: feed.RecordMarker, UserID: userID,
				PublishTime: m.Key.PublishTime, ContentID: m.Key.ContentID}))
		},
		func() error {
			return exportPages(within, emit, &recs, func(ctx context.Context, after feed.Post) ([]feed.Post, error) {
				before := after.Key()
				if after.ContentID == 0 {
					before = store.Top
				}
				return s.store.ListPosts(ctx, userID, before, exportPageSize)
			}, func(p feed.Post) feed.Record {
				return feed.Record{Type: feed.RecordPost, AuthorID: p.AuthorID, ContentID: p.ContentID,
					PublishTime: p.PublishTime, Kind: p.Kind}
			})
		},
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// exportPages reads pages of items with read, each after the last item of
// the one before (the zero T for the first), within a page's deadline,
// and emits each page as records, until a page comes back short.
func exportPages[T any](within func(func(context.Context) error) error, emit func([]feed.Record) error, recs *[]feed.Record,
	read func(ctx context.Context, after T) ([]T, error), record func(T) feed.Record) error {
	var after T
	for {
		var page []T
		err := within(func(ctx context.Context) (err error) {
			page, err = read(ctx, after)
			return err
		})
		if err != nil {
			return err
		}
		*recs = (*recs)[:0]
		for _, it := range page {
			*recs = append(*recs, record(it))
		}
		if len(page) > 0 {
			if err := emit(*recs); err != nil {
				return err
			}
		}
		if len(page) < exportPageSize {
			return nil
		}
		after = page[len(page)-1]
	}
}
