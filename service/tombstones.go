package service

import (
	"context"

	"github.com/feedhq/feed/store"
)

// tombstoneBatch bounds the tombstones one step purges.
const tombstoneBatch = 500

// purgeTombstones purges a batch of the shard's deleted posts whose
// retraction finished more than TombstoneTTL ago.
func (s *Service) purgeTombstones(work context.Context, sh *store.Shard) (int, error) {
	ctx, cancel := s.stepContext(work)
	defer cancel()
	n, err := s.store.PurgeTombstones(ctx, sh, s.now().Add(-s.cfg.TombstoneTTL).UnixMilli(), tombstoneBatch)
	s.metrics.purgedPosts.Add(float64(n))
	return n, err
}
