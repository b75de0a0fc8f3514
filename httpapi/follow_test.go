package httpapi_test

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/feedhq/feed/httpapi"
	"github.com/feedhq/feed/httpapi/client"
	"github.com/feedhq/feed/internal/wait"
	"github.com/feedhq/feed/service"
)

// TestFollowOptions checks ?copy_limit= and ?keep_history=: what they let
// into the feed, and that a bad value is 400 with nothing changed.
func TestFollowOptions(t *testing.T) {
	t.Parallel()
	v := setup(t, envOpts{workers: true, config: func(c *service.Config) { c.InboxLimit = 10 }})

	t.Run("copy_limit", func(t *testing.T) {
		t.Parallel()
		user, author := v.id(), v.id()
		base := time.Now().Add(-time.Hour).UnixMilli()
		var old []post
		for i := range 5 {
			old = append(old, v.publishAt(t, author, v.id(), base+int64(i)))
		}
		for _, bad := range []string{"-1", "11", "x", "1.5", "%20"} {
			r := v.do(t, http.MethodPut, fmt.Sprintf("/v1/users/%d/following/%d?copy_limit=%s", user, author, bad), "")
			wantError(t, r, http.StatusBadRequest, "invalid_argument")
		}
		if got := v.following(t, user); len(got) != 0 {
			t.Fatalf("following after refused follows: %+v", got)
		}
		wantStatus(t, v.do(t, http.MethodPut, fmt.Sprintf("/v1/users/%d/following/%d?copy_limit=2", user, author), ""), http.StatusNoContent)
		want := []post{old[4], old[3]}
		if got := v.feed(t, user); !slices.Equal(got, want) {
			t.Fatalf("feed %v, want %v", postIDs(got), postIDs(want))
		}
		fresh := v.publish(t, author, `{}`, http.StatusCreated)
		want = []post{fresh, old[4], old[3]}
		waitFeed(t, v, user, want)
		// The feed can show the fresh post before it reaches the inbox
		// (merged from the outbox while the follow's backfill is pending):
		// wait for the inbox to hold it, the follow and the fan-out done.
		waitInbox(t, v, user, len(want))
		// A repeated follow with another limit changes nothing.
		wantStatus(t, v.do(t, http.MethodPut, fmt.Sprintf("/v1/users/%d/following/%d?copy_limit=5", user, author), ""), http.StatusNoContent)
		if got := v.feed(t, user); !slices.Equal(got, want) {
			t.Fatalf("feed after a repeat %v, want %v", postIDs(got), postIDs(want))
		}
	})

	t.Run("keep_history", func(t *testing.T) {
		t.Parallel()
		user, author := v.id(), v.id()
		base := time.Now().Add(-time.Hour).UnixMilli()
		var old []post
		for i := range 3 {
			old = append(old, v.publishAt(t, author, v.id(), base+int64(i)))
		}
		wantStatus(t, v.do(t, http.MethodPut, fmt.Sprintf("/v1/users/%d/following/%d", user, author), ""), http.StatusNoContent)
		want := []post{old[2], old[1], old[0]}
		waitInbox(t, v, user, len(want))
		for _, bad := range []string{"yes", "1", "TRUE"} {
			r := v.do(t, http.MethodDelete, fmt.Sprintf("/v1/users/%d/following/%d?keep_history=%s", user, author, bad), "")
			wantError(t, r, http.StatusBadRequest, "invalid_argument")
		}
		if got := v.following(t, user); len(got) != 1 {
			t.Fatalf("following after refused unfollows: %+v", got)
		}
		wantStatus(t, v.do(t, http.MethodDelete, fmt.Sprintf("/v1/users/%d/following/%d?keep_history=true", user, author), ""), http.StatusNoContent)
		if got := v.following(t, user); len(got) != 0 {
			t.Fatalf("following after the unfollow: %+v", got)
		}
		if got := v.feed(t, user); !slices.Equal(got, want) {
			t.Fatalf("feed after keeping %v, want %v", postIDs(got), postIDs(want))
		}
		wantStatus(t, v.do(t, http.MethodDelete, "/v1/users/"+u(author)+"/posts/"+old[1].ContentID, ""), http.StatusNoContent)
		waitFeed(t, v, user, []post{old[2], old[0]})
		wantStatus(t, v.do(t, http.MethodDelete, fmt.Sprintf("/v1/users/%d/following/%d?keep_history=false", user, author), ""), http.StatusNoContent)
		if got := v.feed(t, user); len(got) != 0 {
			t.Fatalf("feed after a plain unfollow %v", postIDs(got))
		}
	})
}

// waitFeed waits until the user's feed is want.
func waitFeed(t *testing.T, v *env, user uint64, want []post) {
	t.Helper()
	wait.For(t, "the feed", func() error {
		if got := v.feed(t, user); !slices.Equal(got, want) {
			return fmt.Errorf("feed %v, want %v", postIDs(got), postIDs(want))
		}
		return nil
	})
}

// waitInbox waits until the user's inbox holds n posts: the follow's
// backfill has run.
func waitInbox(t *testing.T, v *env, user uint64, n int) {
	t.Helper()
	wait.For(t, "the backfill", func() error {
		got, err := v.st.InboxKeys(t.Context(), user)
		if err == nil && len(got) != n {
			err = fmt.Errorf("inbox holds %d posts, want %d", len(got), n)
		}
		return err
	})
}

type followResult struct {
	UserID   string `json:"user_id"`
	AuthorID string `json:"author_id"`
	Status   string `json:"status"`
	Error    *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// TestFollowManyRoute checks POST /v1/follows: each pair's outcome in
// order, a run again, and bodies refused whole with nothing changed.
func TestFollowManyRoute(t *testing.T) {
	t.Parallel()
	v := setup(t, envOpts{config: func(c *service.Config) { c.MaxFollowing = 2 }})
	follows := func(t *testing.T, body string) resp {
		return v.do(t, http.MethodPost, "/v1/follows", body)
	}
	u1, u2, a1, a2, a3 := v.id(), v.id(), v.id(), v.id(), v.id()
	body := fmt.Sprintf(`{"follows":[{"user_id":"%d","author_id":"%d"},{"user_id":%d,"author_id":%d,"copy_limit":3},`+
		`{"user_id":"%d","author_id":"%d"},{"user_id":"%d","author_id":"%d"},{"user_id":"%d","author_id":"%d"},`+
		`{"user_id":"%d","author_id":"%d","copy_limit":100000},{"user_id":"%d","author_id":"%d"}]}`,
		u1, a1, u1, a2, u1, a1, u1, a3, u2, u2, u2, a1, u2, a2)
	want := []string{"created", "created", "exists", "error:limit_exceeded", "error:invalid_argument", "error:invalid_argument", "created"}
	for run := range 2 {
		r := follows(t, body)
		wantStatus(t, r, http.StatusOK)
		var got struct {
			Results []followResult `json:"results"`
		}
		r.decode(t, &got)
		if len(got.Results) != len(want) {
			t.Fatalf("run %d: %d results, want %d", run, len(got.Results), len(want))
		}
		for i, res := range got.Results {
			status := res.Status
			if res.Error != nil {
				status += ":" + res.Error.Code
			}
			w := want[i]
			if run == 1 && w == "created" {
				w = "exists"
			}
			if status != w {
				t.Errorf("run %d, pair %d: %s (%+v), want %s", run, i, status, res.Error, w)
			}
		}
		if got.Results[1].UserID != u(u1) || got.Results[1].AuthorID != u(a2) {
			t.Errorf("pair 1 names %s→%s", got.Results[1].UserID, got.Results[1].AuthorID)
		}
	}
	if got := ids(v.following(t, u1), func(f following) string { return f.AuthorID }); !slices.Equal(got, []string{u(a1), u(a2)}) {
		t.Fatalf("u1 follows %v", got)
	}

	// Refused whole: nothing changes.
	user, author := v.id(), v.id()
	pair := fmt.Sprintf(`{"user_id":"%d","author_id":"%d"}`, user, author)
	for _, bad := range []string{
		`{"follows":[` + pair + `,{"user_id":"0","author_id":"5"}]}`,
		`{"follows":[` + pair + `,{"user_id":"7"}]}`,
		`{"follows":[` + pair + `,{"user_id":"7","author_id":"8","extra":1}]}`,
		`{"follows":[` + pair + `,{"user_id":"7","author_id":"8","copy_limit":"3"}]}`,
		`{"follows":[` + pair + `,{"user_id":"7","author_id":"8","copy_limit":1.5}]}`,
		`{"follows":[` + pair + `,[7,8]]}`,
		`{"follows":[` + pair + `],"more":true}`,
		`{"follows":[]}`,
		`{}`,
		`[` + pair + `]`,
	} {
		wantError(t, follows(t, bad), http.StatusBadRequest, "invalid_argument")
	}
	many := `{"follows":[` + strings.TrimSuffix(strings.Repeat(pair+",", service.MaxFollowBatch+1), ",") + `]}`
	wantError(t, follows(t, many), http.StatusRequestEntityTooLarge, "payload_too_large")
	if got := v.following(t, user); len(got) != 0 {
		t.Fatalf("following after refused batches: %+v", got)
	}
	// A full batch of long ids fits its body limit.
	var b strings.Builder
	b.WriteString(`{"follows":[`)
	for i := range service.MaxFollowBatch {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"user_id":"%d","author_id":"%d","copy_limit":300}`, uint64(18446744073709550000)+uint64(i%2), uint64(18446744073709540000)+uint64(i))
	}
	b.WriteString(`]}`)
	if b.Len() <= httpapi.MaxBodyBytes {
		t.Fatalf("a full batch of long ids is %d bytes: not a test of the larger limit", b.Len())
	}
	wantStatus(t, follows(t, b.String()), http.StatusOK)
}

// TestClientFollows drives the follow options and the batch through the Go
// client.
func TestClientFollows(t *testing.T) {
	t.Parallel()
	v := setup(t, envOpts{})
	c := client.New(v.srv.URL, "", v.srv.Client())
	user, author, other := v.id(), v.id(), v.id()
	base := time.Now().Add(-time.Hour).UnixMilli()
	var old []post
	for i := range 3 {
		old = append(old, v.publishAt(t, author, v.id(), base+int64(i)))
	}
	if err := c.FollowLimited(t.Context(), user, author, 1); err != nil {
		t.Fatal(err)
	}
	if got := v.feed(t, user); !slices.Equal(got, []post{old[2]}) {
		t.Fatalf("feed %v, want the newest post only", postIDs(got))
	}
	if err := c.UnfollowKeepingHistory(t.Context(), user, author); err != nil {
		t.Fatal(err)
	}
	one := 1
	res, err := c.FollowMany(t.Context(), []client.FollowPair{
		{UserID: u(user), AuthorID: u(other), CopyLimit: &one},
		{UserID: u(user), AuthorID: u(user)},
	})
	if err != nil || len(res) != 2 || res[0].Status != "created" || res[1].Status != "error" || res[1].Error == nil || res[1].Error.Code != "invalid_argument" {
		t.Fatalf("FollowMany = %+v, %v", res, err)
	}
	var apiErr *client.Error
	if _, err := c.FollowMany(t.Context(), nil); !errors.As(err, &apiErr) || apiErr.Status != http.StatusBadRequest {
		t.Fatalf("empty batch: %v", err)
	}
}
