package store_test

import (
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/feedhq/feed"
)

// TestAdvanceMarkerForwardOnly moves one user's marker from many
// goroutines at once to random positions, many of them at equal publish
// times: whatever the interleaving, the marker ends at the greatest one,
// and every call returns a marker at or above its own position.
func TestAdvanceMarkerForwardOnly(t *testing.T) {
	t.Parallel()
	st := newStore(t, 1)
	const user = 42
	if _, ok, err := st.GetMarker(t.Context(), user); err != nil || ok {
		t.Fatalf("marker before any: ok %v, %v", ok, err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	keys := make([]feed.Key, 64)
	var top feed.Key
	for i := range keys {
		keys[i] = feed.Key{PublishTime: t0 + int64(r.IntN(4)), ContentID: r.Uint64N(1000) + 1}
		if top.Less(keys[i]) {
			top = keys[i]
		}
	}
	var wg sync.WaitGroup
	for i, k := range keys {
		wg.Go(func() {
			m, err := st.AdvanceMarker(t.Context(), user, k, t0+int64(i))
			if err != nil {
				t.Error(err)
				return
			}
			if m.Key.Less(k) {
				t.Errorf("advance to %v returned %v, below it", k, m.Key)
			}
		})
	}
	wg.Wait()
	m, ok, err := st.GetMarker(t.Context(), user)
	if err != nil || !ok || m.Key != top {
		t.Fatalf("marker %+v (ok %v, %v), want %v", m, ok, err, top)
	}
	back, err := st.AdvanceMarker(t.Context(), user, feed.Key{PublishTime: top.PublishTime, ContentID: top.ContentID - 1}, t0+1000)
	if err != nil || back != m {
		t.Fatalf("moving back: %+v, %v; want %+v unchanged", back, err, m)
	}
}
