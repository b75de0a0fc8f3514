package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
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

// planSeeds draws the posts each user has before the mix: perUser each,
// their publish times spread over the last day, their content ids the
// bench's own. By author index.
func planSeeds(g *mixGraph, perUser int, rng *rand.Rand) [][]mixPost {
	now := time.Now().UnixMilli()
	seeds := make([][]mixPost, len(g.users))
	id := uint64(1) << 50
	for u := range g.users {
		for range perUser {
			id++
			seeds[u] = append(seeds[u], mixPost{ID: id, Time: now - 1 - rng.Int64N(24*time.Hour.Milliseconds())})
		}
	}
	return seeds
}

// seedPosts publishes the seeds through the API at addr, each with its
// content id and publish time.
func seedPosts(ctx context.Context, addr string, g *mixGraph, seeds [][]mixPost) error {
	type job struct {
		author int
		p      mixPost
	}
	var jobs []job
	for u, ps := range seeds {
		for _, p := range ps {
			jobs = append(jobs, job{u, p})
		}
	}
	pool := &connPool{addr: addr}
	defer pool.close()
	return spread(8, len(jobs), func(i int) error {
		j := jobs[i]
		body := []byte(`{"content_id":"` + strconv.FormatUint(j.p.ID, 10) + `","publish_time":` + strconv.FormatInt(j.p.Time, 10) + `}`)
		if _, err := pool.call(ctx, "POST", "/v1/users/"+strconv.FormatUint(g.users[j.author], 10)+"/posts", body, time.Minute, 201); err != nil {
			return fmt.Errorf("seed posts: %w", err)
		}
		return nil
	})
}

// importGraph loads the graph's follows and the seeds into feedd's
// database with feedd import (bin), as an app adopting feed brings its
// data: the follows through POST /v1/follows would leave a follow event
// each for the workers, minutes of backfills on 2 cores.
func importGraph(ctx context.Context, bin, dsn string, pushThreshold int, g *mixGraph, seeds [][]mixPost, dir string) error {
	path := filepath.Join(dir, "mix.jsonl")
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	for u, fs := range g.followees {
		for _, a := range fs {
			fmt.Fprintf(w, `{"type":"follow","user_id":"%d","author_id":"%d"}`+"\n", g.users[u], g.users[a])
		}
	}
	for u, ps := range seeds {
		for _, p := range ps {
			fmt.Fprintf(w, `{"type":"post","author_id":"%d","content_id":"%d","publish_time":%d}`+"\n", g.users[u], p.ID, p.Time)
		}
	}
	if err := errors.Join(w.Flush(), f.Close()); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, bin, "import", "--mysql-dsn", dsn, "--push-threshold", strconv.Itoa(pushThreshold), path)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("feedd import: %w\n%s", err, out)
	}
	return nil
}
