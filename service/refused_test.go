package service_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"

	"github.com/go-sql-driver/mysql"
)

// refusedSQL are the server errors that say a statement can never run on
// this server (syntax, a missing table or column, a feature the engine
// lacks, a collation mix), unlike a deadlock, a lock wait or an outage.
// Workers retry every failed step, so a test waiting for their work would
// otherwise wait out its deadline for a state that cannot come.
var refusedSQL = []uint16{1054, 1064, 1105, 1146, 1221, 1235, 1267, 1270, 1271}

// refusals records the first worker step that failed with a refused
// statement; the harness's waits fail with it at once.
type refusals struct {
	mu    sync.Mutex
	first error
}

func (r *refusals) err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.first
}

// handler is a slog.Handler that keeps nothing but worker errors with a
// refused statement.
func (r *refusals) handler() slog.Handler { return refusalHandler{r} }

type refusalHandler struct{ r *refusals }

func (h refusalHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelError }
func (h refusalHandler) WithAttrs([]slog.Attr) slog.Handler           { return h }
func (h refusalHandler) WithGroup(string) slog.Handler                { return h }

func (h refusalHandler) Handle(_ context.Context, rec slog.Record) error {
	rec.Attrs(func(a slog.Attr) bool {
		err, ok := a.Value.Any().(error)
		var my *mysql.MySQLError
		if !ok || !errors.As(err, &my) || !slices.Contains(refusedSQL, my.Number) {
			return true
		}
		h.r.mu.Lock()
		if h.r.first == nil {
			h.r.first = err
		}
		h.r.mu.Unlock()
		return false
	})
	return nil
}
