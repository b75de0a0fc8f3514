package store

import (
	"context"

	"github.com/jmoiron/sqlx"
)

// Class is a kind of work with a connection pool of its own on every
// database, so that one kind stalled (writes waiting for a backup's lock,
// workers waiting for a hung database) cannot take the connections another
// needs: feed reads, which such a lock allows, keep answering.
type Class int

const (
	// Workers is background work: planning, fan-out, follow events,
	// retention. It is the class of a context that names none.
	Workers Class = iota
	// Reads is API reads: feed pages, lists, delivery status, and the
	// readiness probes' reads.
	Reads
	// Writes is API writes, a read's activity mark and the readiness
	// probes' writes.
	Writes
	numClasses
)

// String names the class in metrics and logs.
func (c Class) String() string {
	switch c {
	case Reads:
		return "reads"
	case Writes:
		return "writes"
	}
	return "workers"
}

// Classes lists every class.
func Classes() []Class { return []Class{Workers, Reads, Writes} }

type classKey struct{}

// WithClass returns ctx whose statements use the pools of class c.
func WithClass(ctx context.Context, c Class) context.Context {
	return context.WithValue(ctx, classKey{}, c)
}

func classOf(ctx context.Context) Class {
	c, _ := ctx.Value(classKey{}).(Class)
	return c
}

// pool returns the shard's pool for ctx's class.
func (sh *Shard) pool(ctx context.Context) *sqlx.DB { return sh.pools[classOf(ctx)] }

// Pool returns the shard's pool of class c, for its statistics.
func (sh *Shard) Pool(c Class) *sqlx.DB { return sh.pools[c] }
