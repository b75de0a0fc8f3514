package service_test

import (
	"context"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/service"
)

// exportLines runs an export that emits records into lines, checks that
// each line parses back (feed.ParseRecord) to the record written, and
// returns the lines sorted.
func exportLines(t testing.TB, run func(emit func([]feed.Record) error) error) []string {
	t.Helper()
	var lines []string
	err := run(func(recs []feed.Record) error {
		for _, r := range recs {
			line := r.AppendJSON(nil)
			got, err := feed.ParseRecord(line, time.Now().Add(time.Hour).UnixMilli())
			if err != nil || got != r {
				t.Errorf("line %s parses to %+v, %v; want %+v", line, got, err, r)
			}
			lines = append(lines, string(line))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(lines)
	return lines
}

// recordLines returns the lines of recs, sorted.
func recordLines(recs ...feed.Record) []string {
	out := make([]string, 0, len(recs))
	for _, r := range recs {
		out = append(out, string(r.AppendJSON(nil)))
	}
	slices.Sort(out)
	return out
}

// TestExport writes follows, a mute, a hide, a marker and posts (one of
// them deleted) on two databases through the service, and checks that
// every export gives exactly the records of its users: the whole
// deployment, ranges of user ids, one user's export, page sizes down to
// one row, and rows a database holds for ids it does not own (a reshard's
// leftovers), which come out once, from their owner.
func TestExport(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{shards: 2})
	ctx := context.Background()
	const reader, muted, hider = 7001, 7003, 7004
	author := uint64(7100)
	for h.store.ShardOf(author) == h.store.ShardOf(reader) {
		author++
	}
	now := time.Now().Add(-time.Minute).UnixMilli()
	p1 := h.publish(t, author, 70_001, now-3000)
	p2, _, err := h.svc.Publish(ctx, service.PublishInput{AuthorID: author, ContentID: 70_003, PublishTime: &p1.PublishTime, Kind: "photo"})
	if err != nil {
		t.Fatal(err)
	}
	p3 := h.publish(t, author, 70_002, p1.PublishTime) // ties p2's time
	gone := h.publish(t, author, 70_004, now-2000)
	own := h.publish(t, reader, 70_005, now-1000)
	h.follow(t, reader, author)
	h.follow(t, reader, hider)
	if err := h.svc.Mute(ctx, reader, muted, true); err != nil {
		t.Fatal(err)
	}
	if err := h.svc.Hide(ctx, hider, reader, true); err != nil {
		t.Fatal(err)
	}
	if err := h.svc.DeletePost(ctx, author, gone.ContentID); err != nil {
		t.Fatal(err)
	}
	h.waitIdle(t)
	page, err := h.svc.Feed(ctx, reader, feed.Page{Limit: 1})
	if err != nil || len(page.Items) != 1 || page.Items[0] != own {
		t.Fatalf("feed page %+v, %v", page, err)
	}
	if _, err := h.svc.SetMarker(ctx, reader, page.Top); err != nil {
		t.Fatal(err)
	}

	var follows []feed.Record
	for _, a := range []uint64{author, hider} {
		f, err := h.store.GetFollowing(ctx, reader, a)
		if err != nil || f.FollowedAt == 0 {
			t.Fatalf("following %d→%d: %+v, %v", reader, a, f, err)
		}
		follows = append(follows, feed.Record{Type: feed.RecordFollow, UserID: reader, AuthorID: a, FollowedAt: f.FollowedAt})
	}
	post := func(p feed.Post) feed.Record {
		return feed.Record{Type: feed.RecordPost, AuthorID: p.AuthorID, ContentID: p.ContentID, PublishTime: p.PublishTime, Kind: p.Kind}
	}
	mute := feed.Record{Type: feed.RecordMute, UserID: reader, AuthorID: muted}
	hide := feed.Record{Type: feed.RecordHide, UserID: reader, AuthorID: hider}
	marker := feed.Record{Type: feed.RecordMarker, UserID: reader, PublishTime: own.PublishTime, ContentID: own.ContentID}
	readerRecs := append(slices.Clone(follows), mute, hide, marker, post(own))
	authorRecs := []feed.Record{post(p1), post(p2), post(p3)}

	export := func(lo, hi uint64) []string {
		return exportLines(t, func(emit func([]feed.Record) error) error {
			return h.svc.Export(ctx, lo, hi, func(recs []feed.Record, _ int) error { return emit(recs) })
		})
	}
	exportUser := func(user uint64) []string {
		return exportLines(t, func(emit func([]feed.Record) error) error {
			return h.svc.ExportUser(ctx, user, 10*time.Second, emit)
		})
	}
	check := func(what string, got []string, want ...feed.Record) {
		t.Helper()
		if w := recordLines(want...); !slices.Equal(got, w) {
			t.Errorf("%s:\n got %q\nwant %q", what, got, w)
		}
	}
	everything := append(slices.Clone(readerRecs), authorRecs...)
	check("export of every user", export(1, math.MaxUint64), everything...)
	check("export of the reader", export(reader, reader), readerRecs...)
	check("export of the author", export(author, author), authorRecs...)
	check("export of users above both", export(author+1, math.MaxUint64))
	check("the reader's own export", exportUser(reader), follows[0], follows[1], mute, marker, post(own))
	check("the author's own export", exportUser(author), authorRecs...)
	check("the hider's own export", exportUser(hider), hide)
	check("a user with nothing", exportUser(9999))
	if err := h.svc.Export(ctx, 5, 4, func([]feed.Record, int) error { return nil }); feed.ErrorCode(err) != feed.EINVALID {
		t.Errorf("export of 5-4: %v, want %s", err, feed.EINVALID)
	}

	// Pages of one and two rows read the same records as one page.
	for _, typ := range service.ExportTypes {
		for _, sh := range h.store.Shards() {
			var want []string
			for _, size := range []int{1000, 1, 2} {
				got := exportLines(t, func(emit func([]feed.Record) error) error {
					return h.store.Export(ctx, sh, typ, 1, math.MaxUint64, size, func(recs []feed.Record, _ int) error { return emit(recs) })
				})
				if size == 1000 {
					want = got
				} else if !slices.Equal(got, want) {
					t.Errorf("%s on %s in pages of %d: %q, want %q", typ, sh.Name, size, got, want)
				}
			}
		}
	}

	// A reshard leaves copies of rows on the database that gave them up
	// until its cleanup: they are not records of that database.
	for _, p := range authorRecs {
		if _, err := h.store.ShardOf(reader).DB.ExecContext(ctx,
			`INSERT INTO posts (author_id, publish_time, content_id, kind, created_at) VALUES (?, ?, ?, ?, ?)`,
			p.AuthorID, p.PublishTime, p.ContentID, p.Kind, now); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range follows {
		if _, err := h.store.ShardOf(author).DB.ExecContext(ctx,
			`INSERT INTO following (user_id, author_id, followed_at) VALUES (?, ?, ?)`, f.UserID, f.AuthorID, f.FollowedAt); err != nil {
			t.Fatal(err)
		}
	}
	check("export with a reshard's leftovers", export(1, math.MaxUint64), everything...)
}
