package httpapi_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/feedhq/feed/internal/wait"
)

// moveCount and move decode the progress of a move strictly.
type moveCount struct {
	Moved   int64 `json:"moved"`
	Skipped int64 `json:"skipped"`
	Total   int64 `json:"total"`
}

type move struct {
	UserID    string    `json:"user_id"`
	To        string    `json:"to"`
	State     string    `json:"state"`
	Follows   moveCount `json:"follows"`
	Mutes     moveCount `json:"mutes"`
	Hides     moveCount `json:"hides"`
	Marker    moveCount `json:"marker"`
	Followers moveCount `json:"followers"`
	CreatedAt int64     `json:"created_at"`
	UpdatedAt int64     `json:"updated_at"`
}

func TestMoveRoutes(t *testing.T) {
	t.Parallel()
	v := setup(t, envOpts{workers: true})
	user, to, other, author, fan := v.id(), v.id(), v.id(), v.id(), v.id()
	wantStatus(t, v.do(t, http.MethodPut, fmt.Sprintf("/v1/users/%d/following/%d", user, author), ""), http.StatusNoContent)
	wantStatus(t, v.do(t, http.MethodPut, fmt.Sprintf("/v1/users/%d/following/%d", fan, user), ""), http.StatusNoContent)
	path := fmt.Sprintf("/v1/users/%d/move", user)

	wantError(t, v.do(t, http.MethodGet, path, ""), http.StatusNotFound, "not_found")
	for _, body := range []string{`{}`, `{"to":null}`, `{"to":0}`, `{"to":"0"}`, `{"to":-1}`, `{"to":1.5}`, `{"to":"1e3"}`,
		`{"to":"18446744073709551616"}`, `{"to":true}`, `{"to":"abc"}`, `{"to":` + u(user) + `}`, `{"to":"` + u(to) + `","x":1}`, `[]`} {
		wantError(t, v.do(t, http.MethodPost, path, body), http.StatusBadRequest, "invalid_argument")
	}
	wantError(t, v.do(t, http.MethodGet, path, ""), http.StatusNotFound, "not_found")

	r := v.do(t, http.MethodPost, path, `{"to":`+u(to)+`}`)
	wantStatus(t, r, http.StatusAccepted)
	var first move
	r.decode(t, &first)
	if first.UserID != u(user) || first.To != u(to) || first.Follows.Total != 1 {
		t.Fatalf("accepted move %+v", first)
	}
	r = v.do(t, http.MethodPost, path, `{"to":"`+u(to)+`"}`)
	wantStatus(t, r, http.StatusAccepted)
	var again move
	r.decode(t, &again)
	if again.CreatedAt != first.CreatedAt || again.To != u(to) {
		t.Fatalf("repeat %+v, first %+v", again, first)
	}

	var m move
	wait.For(t, "the move done", func() error {
		r := v.do(t, http.MethodGet, path, "")
		wantStatus(t, r, http.StatusOK)
		r.decode(t, &m)
		if m.State != "done" {
			return fmt.Errorf("move %+v", m)
		}
		return nil
	})
	if m.Follows != (moveCount{Moved: 1, Total: 1}) || m.Followers.Total != 1 || m.Followers.Moved != 1 {
		t.Errorf("done move %+v", m)
	}
	if got := v.following(t, to); len(got) != 1 || got[0].AuthorID != u(author) {
		t.Errorf("new id follows %+v", got)
	}
	if got := v.following(t, fan); len(got) != 1 || got[0].AuthorID != u(to) {
		t.Errorf("follower follows %+v, want the new id", got)
	}
	// Done: the same move is still 202, a move elsewhere starts anew.
	wantStatus(t, v.do(t, http.MethodPost, path, `{"to":`+u(to)+`}`), http.StatusAccepted)
	wantStatus(t, v.do(t, http.MethodPost, fmt.Sprintf("/v1/users/%d/move", to), `{"to":`+u(other)+`}`), http.StatusAccepted)
}

func TestMoveConflictRoute(t *testing.T) {
	t.Parallel()
	v := setup(t, envOpts{})
	user, to, other := v.id(), v.id(), v.id()
	path := fmt.Sprintf("/v1/users/%d/move", user)
	wantStatus(t, v.do(t, http.MethodPost, path, `{"to":`+u(to)+`}`), http.StatusAccepted)
	wantError(t, v.do(t, http.MethodPost, path, `{"to":`+u(other)+`}`), http.StatusConflict, "conflict")
	r := v.do(t, http.MethodGet, path, "")
	wantStatus(t, r, http.StatusOK)
	var m move
	r.decode(t, &m)
	if m.To != u(to) || m.State != "pending" {
		t.Errorf("after the conflict: %+v", m)
	}
	wantStatus(t, v.do(t, http.MethodHead, path, ""), http.StatusOK)
}
