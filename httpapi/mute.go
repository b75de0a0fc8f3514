package httpapi

import (
	"context"
	"strconv"

	"github.com/feedhq/feed"
	"github.com/labstack/echo/v4"
)

// filterAction adapts a service call that sets (on) or lifts a mute or
// hide to pairAction.
func filterAction(set func(ctx context.Context, id, otherID uint64, on bool) error, on bool) func(ctx context.Context, id, otherID uint64) error {
	return func(ctx context.Context, id, otherID uint64) error { return set(ctx, id, otherID, on) }
}

type mutedJSON struct {
	AuthorID string `json:"author_id"`
	MutedAt  int64  `json:"muted_at"`
}

type hiddenJSON struct {
	UserID   string `json:"user_id"`
	HiddenAt int64  `json:"hidden_at"`
}

func toMutedJSON(m feed.Mute) mutedJSON {
	return mutedJSON{AuthorID: strconv.FormatUint(m.AuthorID, 10), MutedAt: m.At}
}

func toHiddenJSON(m feed.Mute) hiddenJSON {
	return hiddenJSON{UserID: strconv.FormatUint(m.UserID, 10), HiddenAt: m.At}
}

func (a *api) listMuted(c echo.Context) error {
	return listPage(c, a.svc.ListMuted, jsonPage(toMutedJSON))
}

func (a *api) listHiddenFrom(c echo.Context) error {
	return listPage(c, a.svc.ListHiddenFrom, jsonPage(toHiddenJSON))
}
