package store_test

import (
	"testing"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/store"
)

// wantCounts checks the user's counts row, and that it agrees with the
// rows it counts.
func wantCounts(t *testing.T, st *store.Store, user uint64, following, muted int) {
	t.Helper()
	sh := st.ShardOf(user)
	var got struct {
		Following int `db:"following_count"`
		Muted     int `db:"muted_count"`
	}
	if err := sh.DB.GetContext(t.Context(), &got, `SELECT following_count, muted_count FROM user_counts WHERE user_id = ?`, user); err != nil {
		t.Fatalf("counts of %d: %v", user, err)
	}
	rowsFollowing := count(t, sh, "SELECT COUNT(*) FROM following WHERE user_id = ?", user)
	rowsMuted := count(t, sh, "SELECT COUNT(*) FROM mutes WHERE user_id = ? AND muted_at IS NOT NULL", user)
	if got.Following != following || got.Muted != muted || rowsFollowing != following || rowsMuted != muted {
		t.Fatalf("user %d: counts %+v, rows %d following and %d muted; want %d and %d", user, got, rowsFollowing, rowsMuted, following, muted)
	}
}

func TestUserCounts(t *testing.T) {
	t.Parallel()
	st := newStore(t, 1)
	ctx := t.Context()
	setFilter := func(f store.Filter, user, author uint64, on bool) {
		t.Helper()
		if _, err := st.SetFilter(ctx, f, user, author, on, 100, t0); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("kept by follows, unfollows, mutes and unmutes", func(t *testing.T) {
		t.Parallel()
		const user = 10
		for a := uint64(100); a < 105; a++ {
			follow(t, st, user, a)
		}
		follow(t, st, user, 100) // a repeat counts once
		must(t, st.Unfollow(ctx, user, 100, t0))
		must(t, st.UnfollowKeepingHistory(ctx, user, 101, t0))
		must(t, st.Unfollow(ctx, user, 100, t0)) // not followed any more
		for a := uint64(200); a < 203; a++ {
			setFilter(store.Mute, user, a, true)
		}
		setFilter(store.Mute, user, 200, true) // already muted
		setFilter(store.Mute, user, 201, false)
		setFilter(store.Mute, user, 201, false) // not muted any more
		setFilter(store.Hide, 300, user, true)  // the user hides from 300: not a mute of 300's
		setFilter(store.Hide, user, 203, true)  // 203 hides from the user: not a mute either
		wantCounts(t, st, user, 3, 2)
		follows := st.FollowMany(ctx, []store.FollowEdge{{UserID: user, AuthorID: 105}, {UserID: user, AuthorID: 106}, {UserID: user, AuthorID: 105}}, maxFollowing, t0, store.EventLease{})
		for _, o := range follows {
			must(t, o.Err)
		}
		wantCounts(t, st, user, 5, 2)
	})

	t.Run("the caps read the counts, not the rows", func(t *testing.T) {
		t.Parallel()
		const user = 20
		follow(t, st, user, 100)
		setFilter(store.Mute, user, 200, true)
		mustExec(t, st.ShardOf(user).DB, `UPDATE user_counts SET following_count = 3, muted_count = 100 WHERE user_id = ?`, user)
		_, err := st.Follow(ctx, user, 101, 3, t0)
		wantCode(t, err, feed.ELIMIT)
		_, err = st.SetFilter(ctx, store.Mute, user, 201, true, 100, t0)
		wantCode(t, err, feed.ELIMIT)
	})

	t.Run("counts not known are counted from the rows", func(t *testing.T) {
		t.Parallel()
		const user = 30
		for a := uint64(100); a < 104; a++ {
			follow(t, st, user, a)
		}
		setFilter(store.Mute, user, 200, true)
		setFilter(store.Mute, user, 201, true)
		mustExec(t, st.ShardOf(user).DB, `DELETE FROM user_counts WHERE user_id = ?`, user)
		_, err := st.Follow(ctx, user, 104, 4, t0)
		wantCode(t, err, feed.ELIMIT)
		wantCounts(t, st, user, 4, 2) // a refused follow too
		mustExec(t, st.ShardOf(user).DB, `UPDATE user_counts SET muted_count = NULL WHERE user_id = ?`, user)
		_, err = st.SetFilter(ctx, store.Mute, user, 202, true, 2, t0)
		wantCode(t, err, feed.ELIMIT)
		wantCounts(t, st, user, 4, 2) // a refused mute still leaves the counts
		setFilter(store.Mute, user, 202, true)
		wantCounts(t, st, user, 4, 3)
	})

	t.Run("a moved account's counts are counted again", func(t *testing.T) {
		t.Parallel()
		const user, from, to = 40, 400, 401
		follow(t, st, user, from)
		follow(t, st, user, 402)
		setFilter(store.Mute, user, from, true)
		setFilter(store.Mute, user, to, true)
		if _, err := st.Repoint(ctx, user, from, to, t0); err != nil {
			t.Fatal(err)
		}
		if n := count(t, st.ShardOf(user), "SELECT COUNT(*) FROM user_counts WHERE user_id = ? AND following_count IS NOT NULL", user); n != 0 {
			t.Fatalf("a repointed user's counts are still known, want them forgotten")
		}
		follow(t, st, user, 403)
		wantCounts(t, st, user, 3, 1) // 401 (from 400), 402, 403; 401 muted (400's mute merged into it)
	})
}
