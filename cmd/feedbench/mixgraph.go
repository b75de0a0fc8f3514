package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"
)

// kwakExponent is the exponent of the power law Kwak et al. (2010, "What
// is Twitter, a social network or a news media?") fit to the number of
// followers per user on Twitter.
const kwakExponent = 2.276

// topFollowedShare is the share of the other users who follow the most
// followed author: a few authors are followed by most users.
const topFollowedShare = 0.9

// followerCounts returns how many followers each of n authors has, by
// popularity rank, most followed first: a power law of exponent
// kwakExponent in rank form (Zipf–Mandelbrot, d_r = c/(r+k)^(1/(γ-1))),
// with the first author followed by topFollowedShare of the n-1 others and
// the counts summing to about n*mean. The offset k, which flattens the
// head, is found by bisection; every count is in 1..n-1.
func followerCounts(n, mean int) []int {
	a := 1 / (kwakExponent - 1)
	top := topFollowedShare * float64(n-1)
	counts := func(k float64) ([]int, int) {
		c := top * math.Pow(1+k, a)
		out := make([]int, n)
		sum := 0
		for r := range n {
			d := int(math.Round(c / math.Pow(float64(r)+1+k, a)))
			out[r] = min(max(d, 1), n-1)
			sum += out[r]
		}
		return out, sum
	}
	// The sum grows with k: from a pure power law at k=0 toward every
	// author at the top count.
	target := n * mean
	lo, hi := 0.0, float64(n)
	for range 60 {
		mid := (lo + hi) / 2
		if _, s := counts(mid); s < target {
			lo = mid
		} else {
			hi = mid
		}
	}
	out, _ := counts(hi)
	return out
}

// mixGraph is phase O's follow graph over users[i], i in 0..n-1.
type mixGraph struct {
	users     []uint64
	followees [][]int // by user: the indexes of the authors they follow
	followers []int   // by author: follower counts as built
	// rank lists the authors most followed first; the first pullAuthors
	// have more followers than pushThreshold.
	rank          []int
	pushThreshold int
}

// pullAuthors is how many authors phase O's graph puts above feedd's push
// threshold.
const pullAuthors = 2

// mixUserBase is the first user id of phase O (its database is its own).
const mixUserBase = 1_000

// newMixGraph draws the graph: followerCounts over a random order of the
// users, each author's followers drawn uniformly from the others. The push
// threshold falls between the second and the third most followed authors'
// counts, so the two above it push only to active followers.
func newMixGraph(rng *rand.Rand, n, mean int) mixGraph {
	g := mixGraph{users: make([]uint64, n), followees: make([][]int, n), followers: make([]int, n)}
	for i := range n {
		g.users[i] = mixUserBase + uint64(i)
	}
	counts := followerCounts(n, mean)
	g.rank = rng.Perm(n)
	others := make([]int, n)
	for r, author := range g.rank {
		// A partial Fisher–Yates shuffle of everyone but the author.
		others = others[:0]
		for u := range n {
			if u != author {
				others = append(others, u)
			}
		}
		d := counts[r]
		for i := range d {
			j := i + rng.IntN(len(others)-i)
			others[i], others[j] = others[j], others[i]
			g.followees[others[i]] = append(g.followees[others[i]], author)
		}
		g.followers[author] = d
	}
	if n > pullAuthors {
		g.pushThreshold = (counts[pullAuthors-1] + counts[pullAuthors]) / 2
	}
	for _, f := range g.followees {
		slices.Sort(f)
	}
	return g
}

// edges is the number of follows.
func (g *mixGraph) edges() int {
	n := 0
	for _, f := range g.followees {
		n += len(f)
	}
	return n
}

// buildGraph makes the graph's follows through POST /v1/follows at addr,
// a thousand pairs a request on four connections, and checks each pair
// was created.
func buildGraph(ctx context.Context, addr string, g *mixGraph) error {
	type pair struct{ user, author uint64 }
	var pairs []pair
	for u, fs := range g.followees {
		for _, a := range fs {
			pairs = append(pairs, pair{g.users[u], g.users[a]})
		}
	}
	const batch = 1000
	pool := &connPool{addr: addr}
	defer pool.close()
	return spread(4, (len(pairs)+batch-1)/batch, func(i int) error {
		part := pairs[i*batch : min((i+1)*batch, len(pairs))]
		var body bytes.Buffer
		body.WriteString(`{"follows":[`)
		for j, p := range part {
			if j > 0 {
				body.WriteByte(',')
			}
			fmt.Fprintf(&body, `{"user_id":"%d","author_id":"%d"}`, p.user, p.author)
		}
		body.WriteString(`]}`)
		resp, err := pool.call(ctx, "POST", "/v1/follows", body.Bytes(), 2*time.Minute, 200)
		if err != nil {
			return fmt.Errorf("build graph: %w", err)
		}
		if n := bytes.Count(resp, []byte(`"status":"created"`)); n != len(part) {
			return fmt.Errorf("build graph: %d of %d follows created: %.300s", n, len(part), resp)
		}
		return nil
	})
}

// seedPosts has every user publish perUser posts through the API at addr,
// their publish times spread over the last day, and returns them by
// author index.
func seedPosts(ctx context.Context, addr string, g *mixGraph, perUser int, rng *rand.Rand) ([][]mixPost, error) {
	now := time.Now().UnixMilli()
	type job struct {
		author int
		at     int64
	}
	var jobs []job
	for u := range g.users {
		for range perUser {
			jobs = append(jobs, job{u, now - 1 - rng.Int64N(24*time.Hour.Milliseconds())})
		}
	}
	posts := make([]mixPost, len(jobs))
	pool := &connPool{addr: addr}
	defer pool.close()
	err := spread(8, len(jobs), func(i int) error {
		j := jobs[i]
		body := []byte(`{"publish_time":` + strconv.FormatInt(j.at, 10) + `}`)
		resp, err := pool.call(ctx, "POST", "/v1/users/"+strconv.FormatUint(g.users[j.author], 10)+"/posts", body, time.Minute, 201)
		if err != nil {
			return fmt.Errorf("seed posts: %w", err)
		}
		p, err := parsePost(resp)
		if err != nil {
			return fmt.Errorf("seed posts: %w", err)
		}
		posts[i] = p
		return nil
	})
	if err != nil {
		return nil, err
	}
	byAuthor := make([][]mixPost, len(g.users))
	for i, j := range jobs {
		byAuthor[j.author] = append(byAuthor[j.author], posts[i])
	}
	return byAuthor, nil
}
