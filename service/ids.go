package service

import (
	"math/rand/v2"
	"sync"
	"time"
)

// Layout of a server-assigned content id: milliseconds since idEpoch in the
// top 41 bits (roughly time-ordered, good until 2093), then a 13-bit node id,
// then a 10-bit sequence within the millisecond. Unique across processes
// without coordination as long as nodes differ, never from AUTO_INCREMENT
// (rows move between servers).
const (
	nodeBits  = 13
	seqBits   = 10
	maxNodeID = 1<<nodeBits - 1
	maxSeq    = 1<<seqBits - 1
)

var idEpoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()

// idGen assigns content ids.
type idGen struct {
	mu   sync.Mutex
	node uint64
	ms   int64
	seq  uint64
	now  func() time.Time
}

func newIDGen(node int, now func() time.Time) *idGen {
	if node < 0 {
		node = rand.IntN(maxNodeID + 1)
	}
	return &idGen{node: uint64(node), now: now}
}

// next returns a new id. Within one millisecond, or while the clock is
// behind the last id (it was stepped back), it counts the sequence up; when
// the sequence runs out it moves on to the next millisecond, ahead of the
// clock, rather than waiting for the clock under the lock: a clock stepped
// back by a minute would otherwise stall every publish of the process for a
// minute. So ids never repeat and never go back, and run ahead of the clock
// only while more than 1024 ids a millisecond are drawn.
func (g *idGen) next() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch ms := g.now().UnixMilli() - idEpoch; {
	case ms > g.ms:
		g.ms, g.seq = ms, 0
	case g.seq < maxSeq:
		g.seq++
	default:
		g.ms, g.seq = g.ms+1, 0
	}
	return uint64(g.ms)<<(nodeBits+seqBits) | g.node<<seqBits | g.seq
}
