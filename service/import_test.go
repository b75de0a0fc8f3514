package service_test

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/service"
	"github.com/feedhq/feed/store"
)

// importData is a random deployment as records, and the model of the
// feeds it gives.
type importData struct {
	recs  []feed.Record
	users []uint64
	m     *feedModel
}

// randomImport draws users 1..n who follow, publish, mute, hide and mark:
// with readOpts' inbox limit and push threshold, some inboxes get floors
// and some authors pass the threshold (pull), and many posts share times.
func randomImport(r *rand.Rand, n int) importData {
	d := importData{m: newFeedModel()}
	base := time.Now().Add(-48 * time.Hour).UnixMilli()
	for u := uint64(1); u <= uint64(n); u++ {
		d.users = append(d.users, u)
	}
	for _, a := range d.users {
		for range r.IntN(30) {
			p := d.m.newPost(r, a, base+int64(r.IntN(500))*1000)
			p.Kind = randomKind(r)
			d.m.add(p)
			d.recs = append(d.recs, feed.Record{Type: feed.RecordPost, AuthorID: a, ContentID: p.ContentID, PublishTime: p.PublishTime, Kind: p.Kind})
		}
	}
	for _, u := range d.users {
		for _, a := range d.users {
			// Authors 1..3 are popular: past the push threshold.
			if a == u || (a > 3 && r.IntN(4) != 0) {
				continue
			}
			d.m.addFollow(u, a)
			d.recs = append(d.recs, feed.Record{Type: feed.RecordFollow, UserID: u, AuthorID: a, FollowedAt: base + int64(r.IntN(1000))})
		}
		for range r.IntN(3) {
			a := d.users[r.IntN(n)]
			if a == u {
				continue
			}
			f, typ := store.Mute, feed.RecordMute
			if r.IntN(2) == 0 {
				f, typ = store.Hide, feed.RecordHide
			}
			d.m.setFilterOnly(f, u, a)
			d.recs = append(d.recs, feed.Record{Type: typ, UserID: u, AuthorID: a})
		}
	}
	r.Shuffle(len(d.recs), func(i, j int) { d.recs[i], d.recs[j] = d.recs[j], d.recs[i] })
	return d
}

// setFilterOnly records a mute or hide in the model alone.
func (m *feedModel) setFilterOnly(f store.Filter, user, author uint64) {
	if m.filters[user] == nil {
		m.filters[user] = map[uint64]map[store.Filter]bool{}
	}
	if m.filters[user][author] == nil {
		m.filters[user][author] = map[store.Filter]bool{}
	}
	m.filters[user][author][f] = true
}

func jsonLines(recs []feed.Record) []byte {
	var b []byte
	for _, r := range recs {
		b = append(r.AppendJSON(b), '\n')
	}
	return b
}

// runImport checks and imports file through svc.
func runImport(t testing.TB, svc *service.Service, file []byte, opt service.ImportOptions) (service.ImportCheck, service.ImportReport, error) {
	t.Helper()
	check, err := svc.CheckImport(bytes.NewReader(file))
	if err != nil {
		t.Fatalf("check import: %v", err)
	}
	open := func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(file)), nil }
	rep, err := svc.Import(context.Background(), check, open, opt)
	return check, rep, err
}

// checkImported checks every user's feed against the model, and the
// follower lists and counts the records imply.
func checkImported(t *testing.T, h *harness, d importData, label string) {
	t.Helper()
	h.waitIdle(t)
	for _, u := range d.users {
		checkFeed(t, h, d.m, u, label, 7, 100)
		followers, _, err := h.svc.ListFollowers(context.Background(), u, feed.Page{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		if len(followers) != d.m.followers(u) {
			t.Fatalf("%s: author %d has %d followers listed, want %d", label, u, len(followers), d.m.followers(u))
		}
		infos, err := h.store.AuthorInfos(context.Background(), []uint64{u})
		if err != nil {
			t.Fatal(err)
		}
		if got := infos[u].Followers; got != int64(d.m.followers(u)) {
			t.Fatalf("%s: author %d counts %d followers, want %d", label, u, got, d.m.followers(u))
		}
	}
}

// TestImportExact imports a random deployment onto two databases and
// checks every feed page by page against a full sort, then imports the
// same file again: nothing changes.
func TestImportExact(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{shards: 2, configured: readOpts})
	d := randomImport(rand.New(rand.NewPCG(1, 46)), 40)
	file := jsonLines(d.recs)
	check, rep, err := runImport(t, h.svc, file, service.ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if check.Bad != 0 || check.Valid() != int64(len(d.recs)) || rep.Resumed {
		t.Fatalf("check %+v, report %+v: want %d valid records, a first run", check, rep, len(d.recs))
	}
	checkImported(t, h, d, "imported")
	inboxes := map[uint64][]feed.Post{}
	full := 0
	for _, u := range d.users {
		inboxes[u] = h.inbox(t, u)
		if len(inboxes[u]) == h.cfg.InboxLimit {
			full++
		}
	}
	// What the check covers: inboxes cut at the limit, read below their
	// floors, and pull authors.
	infos, err := h.store.AuthorInfos(context.Background(), []uint64{1})
	if err != nil || infos[1].Mode == store.AuthorPush || full == 0 {
		t.Fatalf("author 1 in mode %d (%v), %d full inboxes: want a pull author and full inboxes", infos[1].Mode, err, full)
	}
	if _, _, err := runImport(t, h.svc, file, service.ImportOptions{}); err != nil {
		t.Fatal(err)
	}
	checkImported(t, h, d, "imported again")
	for _, u := range d.users {
		if got := h.inbox(t, u); !slices.Equal(got, inboxes[u]) {
			t.Fatalf("user %d: the second import changed the inbox: %d entries, were %d", u, len(got), len(inboxes[u]))
		}
	}
}

// TestImportRefusesInvalid: a file with an invalid line writes nothing and
// names the line; with SkipInvalid the other lines go in.
func TestImportRefusesInvalid(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	file := []byte(`{"type":"follow","user_id":"1","author_id":"2"}
{"type":"follow","user_id":"1","author_id":"x"}
{"type":"post","author_id":"2","content_id":"10","publish_time":1700000000000}

{"type":"kiss","user_id":"1"}
`)
	check, _, err := runImport(t, h.svc, file, service.ImportOptions{})
	if feed.ErrorCode(err) != feed.EINVALID || !strings.Contains(feed.ErrorMessage(err), "line 2: author_id must be") {
		t.Fatalf("import of a file with invalid lines: %v, want EINVALID naming line 2", err)
	}
	if check.Bad != 2 || len(check.Invalid) != 2 || check.Invalid[1].Line != 5 {
		t.Fatalf("check found %+v, want lines 2 and 5 invalid", check.Invalid)
	}
	if posts, err := h.store.ListPosts(context.Background(), 2, store.Top, 10); err != nil || len(posts) != 0 {
		t.Fatalf("posts after a refused import: %v, %v; want none", posts, err)
	}
	if f, _, err := h.svc.ListFollowing(context.Background(), 1, feed.Page{Limit: 10}); err != nil || len(f) != 0 {
		t.Fatalf("follows after a refused import: %v, %v; want none", f, err)
	}
	if _, _, err := runImport(t, h.svc, file, service.ImportOptions{SkipInvalid: true}); err != nil {
		t.Fatal(err)
	}
	h.waitIdle(t)
	if items := h.feedAll(t, 1, 10); len(items) != 1 || items[0].ContentID != 10 {
		t.Fatalf("feed of 1 after skipping invalid lines: %+v, want post 10", items)
	}
}

// TestImportOnline runs the API beside an import: between the import's
// steps, posts are published and deleted and follows made, and every feed
// ends exactly as the records and those writes give.
func TestImportOnline(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{shards: 2, configured: readOpts})
	r := rand.New(rand.NewPCG(2, 46))
	d := randomImport(r, 40)
	var mu sync.Mutex
	steps := 0
	var failed error
	meanwhile := func(service.ImportProgress) {
		mu.Lock()
		defer mu.Unlock()
		steps++
		ctx := context.Background()
		// A new post of a popular author and of a random one.
		for _, a := range []uint64{1, d.users[r.IntN(len(d.users))]} {
			p := d.m.newPost(r, a, time.Now().UnixMilli()-int64(r.IntN(1000)))
			if _, _, err := h.svc.Publish(ctx, service.PublishInput{AuthorID: a, ContentID: p.ContentID, PublishTime: &p.PublishTime}); err != nil {
				failed = err
				return
			}
			d.m.add(p)
		}
		// A delete of an imported post, once loaded.
		if posts := d.m.posts[uint64(5+steps%10)]; len(posts) > 0 {
			p := posts[0]
			err := h.svc.DeletePost(ctx, p.AuthorID, p.ContentID)
			switch feed.ErrorCode(err) {
			case "":
				d.m.remove(p)
			case feed.ENOTFOUND: // not loaded yet: the import brings it
			default:
				failed = err
				return
			}
		}
		// A follow of someone new to the user.
		u := d.users[r.IntN(len(d.users))]
		for _, a := range d.users {
			if a != u && !d.m.following(u, a) && !d.m.filtered(u, a) {
				if err := h.svc.Follow(ctx, u, a); err != nil {
					failed = err
					return
				}
				d.m.addFollow(u, a)
				break
			}
		}
	}
	if _, _, err := runImport(t, h.svc, jsonLines(d.recs), service.ImportOptions{Progress: meanwhile}); err != nil {
		t.Fatal(err)
	}
	if failed != nil {
		t.Fatal(failed)
	}
	if steps < 3 {
		t.Fatalf("the API wrote at %d steps of the import, want at least 3", steps)
	}
	checkImported(t, h, d, "imported online")
}

// TestImportConflicts: a post record whose content id names another post
// (another author's, or the same author's with other fields) is skipped
// and reported by line, the stored post left alone, as the API answers 409.
func TestImportConflicts(t *testing.T) {
	t.Parallel()
	for _, shards := range []int{1, 2} {
		h := newHarness(t, harnessOpts{shards: shards})
		h.publish(t, 5, 10, 1700000000000)
		h.publish(t, 2, 11, 1700000000000)
		file := []byte(`{"type":"post","author_id":"2","content_id":"10","publish_time":1700000000000}
{"type":"post","author_id":"2","content_id":"11","publish_time":1700000009999}
{"type":"post","author_id":"2","content_id":"12","publish_time":1700000000000}
`)
		_, rep, err := runImport(t, h.svc, file, service.ImportOptions{})
		if err != nil {
			t.Fatal(err)
		}
		lines := []int64{}
		for _, c := range rep.Conflicts {
			lines = append(lines, c.Line)
		}
		slices.Sort(lines)
		if rep.Refused != 2 || !slices.Equal(lines, []int64{1, 2}) {
			t.Fatalf("%d shards: refused %d, lines %v; want lines 1 and 2", shards, rep.Refused, lines)
		}
		posts, err := h.store.ListPosts(context.Background(), 2, store.Top, 10)
		if err != nil {
			t.Fatal(err)
		}
		want := []feed.Post{{ContentID: 12, AuthorID: 2, PublishTime: 1700000000000, Kind: feed.KindPost}, {ContentID: 11, AuthorID: 2, PublishTime: 1700000000000, Kind: feed.KindPost}}
		if !slices.Equal(posts, want) {
			t.Fatalf("%d shards: posts of author 2 %+v, want %+v", shards, posts, want)
		}
	}
}

// TestImportKeepsCopyLimits: a follow made through the API with a copy
// limit keeps its bound when the import brings the author's older posts
// and names the follow again.
func TestImportKeepsCopyLimits(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{shards: 2, configured: readOpts})
	r := rand.New(rand.NewPCG(3, 46))
	d := randomImport(r, 20)
	const user = 1
	author := uint64(4)
	for d.m.filtered(user, author) {
		author++
	}
	for i := range 3 {
		d.m.publish(t, h, author, d.m.newID(r), time.Now().UnixMilli()-int64(i)*1000)
	}
	d.m.followLimited(t, h, user, author, 1)
	h.waitIdle(t)
	d.recs = append(d.recs, feed.Record{Type: feed.RecordFollow, UserID: user, AuthorID: author})
	if _, _, err := runImport(t, h.svc, jsonLines(d.recs), service.ImportOptions{}); err != nil {
		t.Fatal(err)
	}
	checkImported(t, h, d, "imported beside a copy-limited follow")
	// The newest of the three: the imported posts are older than the bound.
	if n := len(postsOf(d.m.feed(user, store.Top), author)); n != 1 {
		t.Fatalf("the model shows %d posts of the limited author, want 1: the test checks nothing", n)
	}
}
