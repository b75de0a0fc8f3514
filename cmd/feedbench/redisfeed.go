package main

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/feedhq/feed"
)

// The Redis anchor: a minimal net/http server that keeps each user's feed
// in a Redis sorted set, as the seeds and Mastodon do, and serves the same
// REST paths and JSON as feedd for pages, posts, deletes, follows and
// unfollows. feedbench runs it as a child process of its own (itself, with
// anchorCommand first), so its CPU is measured apart from the load's.
//
// Keys, under a prefix of the run's own: f:<user> the feed and p:<author>
// the author's posts (sorted sets, score publish_time, member the post's
// content id and author as 16 big-endian bytes, then its kind: members of
// one score sort by content id), F:<author> the followers and G:<user> the
// followees (sets), c a hash of content id → publish_time and member, seq
// the last content id assigned.

// anchorCommand, as feedbench's first argument, runs the anchor instead.
const anchorCommand = "redis-anchor"

// anchorKeys names the anchor's keys under its prefix.
type anchorKeys string

func (k anchorKeys) feed(user uint64) string { return string(k) + "f:" + strconv.FormatUint(user, 10) }
func (k anchorKeys) posts(author uint64) string {
	return string(k) + "p:" + strconv.FormatUint(author, 10)
}
func (k anchorKeys) followers(a uint64) string { return string(k) + "F:" + strconv.FormatUint(a, 10) }
func (k anchorKeys) following(user uint64) string {
	return string(k) + "G:" + strconv.FormatUint(user, 10)
}
func (k anchorKeys) contents() string { return string(k) + "c" }
func (k anchorKeys) seq() string      { return string(k) + "seq" }

// anchorMember encodes a post as a sorted-set member.
func anchorMember(p feed.Post) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], p.ContentID)
	binary.BigEndian.PutUint64(b[8:], p.AuthorID)
	return string(b[:]) + p.Kind
}

// anchorPost decodes a member with its score.
func anchorPost(member string, score float64) (feed.Post, error) {
	if len(member) < 16 {
		return feed.Post{}, fmt.Errorf("bad member %q", member)
	}
	return feed.Post{ContentID: binary.BigEndian.Uint64([]byte(member[:8])), AuthorID: binary.BigEndian.Uint64([]byte(member[8:16])),
		PublishTime: int64(score), Kind: member[16:]}, nil
}

// anchorCursor is a page position: the item's publish time and the
// first 16 bytes of its member.
func anchorCursor(member string, score float64) string {
	return strconv.FormatInt(int64(score), 10) + "_" + hex.EncodeToString([]byte(member[:16]))
}

func parseAnchorCursor(c string) (score int64, key string, err error) {
	t, h, ok := strings.Cut(c, "_")
	b, herr := hex.DecodeString(h)
	score, terr := strconv.ParseInt(t, 10, 64)
	if !ok || herr != nil || terr != nil || len(b) != 16 {
		return 0, "", errors.New("malformed cursor")
	}
	return score, string(b), nil
}

// anchorServer serves the anchor's routes.
type anchorServer struct {
	rdb   *redis.Client
	keys  anchorKeys
	limit int // inbox limit: entries kept per feed
}

// runAnchor is the anchor process: it listens, writes its address on the
// first line of stdout and serves until ctx ends.
func runAnchor(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet(anchorCommand, flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "listen address")
	addr := fs.String("redis", "127.0.0.1:6379", "Redis address")
	prefix := fs.String("prefix", "feedbench:", "prefix of every key")
	limit := fs.Int("inbox-limit", feed.DefaultPageLimit*15, "entries kept per feed")
	if err := fs.Parse(args); err != nil {
		return err
	}
	s := &anchorServer{rdb: redis.NewClient(&redis.Options{Addr: *addr, PoolSize: 64}), keys: anchorKeys(*prefix), limit: *limit}
	defer s.rdb.Close()
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis at %s: %w", *addr, err)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	fmt.Fprintln(os.Stdout, ln.Addr().String())
	srv := &http.Server{Handler: s.routes(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func (s *anchorServer) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/users/{id}/feed", handle(s.getFeed))
	mux.HandleFunc("POST /v1/users/{id}/posts", handle(s.publishPost))
	mux.HandleFunc("DELETE /v1/users/{id}/posts/{content_id}", handle(s.deletePost))
	mux.HandleFunc("PUT /v1/users/{id}/following/{author_id}", handle(s.follow))
	mux.HandleFunc("DELETE /v1/users/{id}/following/{author_id}", handle(s.unfollow))
	mux.HandleFunc("POST /v1/follows", handle(s.follows))
	return mux
}

// anchorItem and anchorPage are feedd's JSON shapes.
type anchorItem struct {
	ContentID   string `json:"content_id"`
	AuthorID    string `json:"author_id"`
	PublishTime int64  `json:"publish_time"`
	Kind        string `json:"kind"`
}

type anchorPage struct {
	Items      []anchorItem `json:"items"`
	NextCursor *string      `json:"next_cursor"`
	TopCursor  *string      `json:"top_cursor"`
}

func itemOf(p feed.Post) anchorItem {
	return anchorItem{ContentID: strconv.FormatUint(p.ContentID, 10), AuthorID: strconv.FormatUint(p.AuthorID, 10), PublishTime: p.PublishTime, Kind: p.Kind}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// anchorError is a request's fault: its status and message.
type anchorError struct {
	status int
	msg    string
}

func (e *anchorError) Error() string { return e.msg }

func bad(status int, msg string) error { return &anchorError{status, msg} }

// handle serves h and answers its error in feedd's envelope: 400
// invalid_argument, 404 not_found or 409 conflict for an anchorError, 503
// unavailable for any other (Redis's).
func handle(h func(w http.ResponseWriter, r *http.Request) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		err := h(w, r)
		if err == nil {
			return
		}
		status, code := http.StatusServiceUnavailable, "unavailable"
		var ae *anchorError
		if errors.As(err, &ae) {
			status, code = ae.status, map[int]string{400: "invalid_argument", 404: "not_found", 409: "conflict"}[ae.status]
		}
		writeJSON(w, status, map[string]any{"error": map[string]string{"code": code, "message": err.Error()}})
	}
}

func pathID(r *http.Request, name string) (uint64, bool) {
	id, err := strconv.ParseUint(r.PathValue(name), 10, 64)
	return id, err == nil && id > 0
}

func (s *anchorServer) getFeed(w http.ResponseWriter, r *http.Request) error {
	user, ok := pathID(r, "id")
	limit, err := strconv.Atoi(r.URL.Query().Get("limit"))
	if r.URL.Query().Get("limit") == "" {
		limit, err = feed.DefaultPageLimit, nil
	}
	if !ok || err != nil || limit < 1 || limit > 100 {
		return bad(400, "bad user id or limit")
	}
	page, err := s.page(r.Context(), user, limit, r.URL.Query().Get("cursor"))
	if err != nil {
		return bad(400, err.Error())
	}
	writeJSON(w, 200, page)
	return nil
}

// page reads limit items below cursor (from the top if ""), newest first.
func (s *anchorServer) page(ctx context.Context, user uint64, limit int, cursor string) (anchorPage, error) {
	maxScore, after := "+inf", ""
	var afterScore int64
	if cursor != "" {
		var err error
		if afterScore, after, err = parseAnchorCursor(cursor); err != nil {
			return anchorPage{}, err
		}
		maxScore = strconv.FormatInt(afterScore, 10)
	}
	page := anchorPage{Items: []anchorItem{}}
	var last redis.Z
	batch := int64(limit + 1)
	for offset := int64(0); ; offset += batch {
		zs, err := s.rdb.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{Key: s.keys.feed(user), Start: maxScore, Stop: "-inf",
			ByScore: true, Rev: true, Offset: offset, Count: batch}).Result()
		if err != nil {
			return page, err
		}
		for _, z := range zs {
			m := z.Member.(string)
			// Members of the cursor's score at or above it were on
			// earlier pages.
			if after != "" && int64(z.Score) == afterScore && m[:16] >= after {
				continue
			}
			if len(page.Items) == limit {
				next := anchorCursor(last.Member.(string), last.Score)
				page.NextCursor = &next
				return page, nil
			}
			p, err := anchorPost(m, z.Score)
			if err != nil {
				return page, err
			}
			if len(page.Items) == 0 {
				top := anchorCursor(m, z.Score)
				page.TopCursor = &top
			}
			page.Items = append(page.Items, itemOf(p))
			last = z
		}
		if int64(len(zs)) < batch {
			return page, nil
		}
	}
}

func (s *anchorServer) publishPost(w http.ResponseWriter, r *http.Request) error {
	author, ok := pathID(r, "id")
	var in struct {
		ContentID   json.Number `json:"content_id"`
		PublishTime *int64      `json:"publish_time"`
		Kind        string      `json:"kind"`
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(&in); err != nil && !errors.Is(err, io.EOF) || !ok {
		return bad(400, "bad author id or body")
	}
	ctx := r.Context()
	p := feed.Post{AuthorID: author, PublishTime: time.Now().UnixMilli(), Kind: in.Kind}
	if in.PublishTime != nil {
		p.PublishTime = *in.PublishTime
	}
	if p.Kind == "" {
		p.Kind = feed.KindPost
	}
	if in.ContentID != "" {
		id, err := strconv.ParseUint(in.ContentID.String(), 10, 64)
		if err != nil || id == 0 {
			return bad(400, "bad content_id")
		}
		p.ContentID = id
	} else {
		id, err := s.rdb.Incr(ctx, s.keys.seq()).Result()
		if err != nil {
			return err
		}
		p.ContentID = uint64(id)
	}
	m := anchorMember(p)
	fresh, err := s.rdb.HSetNX(ctx, s.keys.contents(), strconv.FormatUint(p.ContentID, 10), strconv.FormatInt(p.PublishTime, 10)+"_"+m).Result()
	if err != nil {
		return err
	}
	if !fresh {
		return bad(409, "content_id exists")
	}
	if err := s.push(ctx, p, m); err != nil {
		return err
	}
	writeJSON(w, 201, itemOf(p))
	return nil
}

// push adds the post to its author's posts and feed and to every
// follower's feed, trimmed to the limit, in one pipeline.
func (s *anchorServer) push(ctx context.Context, p feed.Post, m string) error {
	followers, err := s.rdb.SMembers(ctx, s.keys.followers(p.AuthorID)).Result()
	if err != nil {
		return err
	}
	z := redis.Z{Score: float64(p.PublishTime), Member: m}
	pipe := s.rdb.Pipeline()
	pipe.ZAdd(ctx, s.keys.posts(p.AuthorID), z)
	add := func(key string) {
		pipe.ZAdd(ctx, key, z)
		pipe.ZRemRangeByRank(ctx, key, 0, int64(-s.limit-1))
	}
	add(s.keys.feed(p.AuthorID))
	for _, f := range followers {
		add(string(s.keys) + "f:" + f)
	}
	_, err = pipe.Exec(ctx)
	return err
}

func (s *anchorServer) deletePost(w http.ResponseWriter, r *http.Request) error {
	author, ok1 := pathID(r, "id")
	id, ok2 := pathID(r, "content_id")
	if !ok1 || !ok2 {
		return bad(400, "bad id")
	}
	ctx := r.Context()
	v, err := s.rdb.HGet(ctx, s.keys.contents(), strconv.FormatUint(id, 10)).Result()
	if errors.Is(err, redis.Nil) {
		return bad(404, "post not found")
	} else if err != nil {
		return err
	}
	_, m, _ := strings.Cut(v, "_")
	if p, err := anchorPost(m, 0); err != nil || p.AuthorID != author {
		return bad(404, "post not found")
	}
	followers, err := s.rdb.SMembers(ctx, s.keys.followers(author)).Result()
	if err != nil {
		return err
	}
	pipe := s.rdb.Pipeline()
	pipe.ZRem(ctx, s.keys.posts(author), m)
	pipe.ZRem(ctx, s.keys.feed(author), m)
	for _, f := range followers {
		pipe.ZRem(ctx, string(s.keys)+"f:"+f, m)
	}
	pipe.HDel(ctx, s.keys.contents(), strconv.FormatUint(id, 10))
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// followOne makes user follow author and copies the author's newest posts
// into the user's feed; created is false if the user followed already.
func (s *anchorServer) followOne(ctx context.Context, user, author uint64) (created bool, err error) {
	n, err := s.rdb.SAdd(ctx, s.keys.following(user), author).Result()
	if err != nil || n == 0 {
		return false, err
	}
	if err := s.rdb.SAdd(ctx, s.keys.followers(author), user).Err(); err != nil {
		return false, err
	}
	zs, err := s.rdb.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{Key: s.keys.posts(author), Start: 0, Stop: int64(s.limit - 1), Rev: true}).Result()
	if err != nil || len(zs) == 0 {
		return true, err
	}
	pipe := s.rdb.Pipeline()
	pipe.ZAdd(ctx, s.keys.feed(user), zs...)
	pipe.ZRemRangeByRank(ctx, s.keys.feed(user), 0, int64(-s.limit-1))
	_, err = pipe.Exec(ctx)
	return true, err
}

func (s *anchorServer) follow(w http.ResponseWriter, r *http.Request) error {
	user, ok1 := pathID(r, "id")
	author, ok2 := pathID(r, "author_id")
	if !ok1 || !ok2 || user == author {
		return bad(400, "bad ids or a self-follow")
	}
	if _, err := s.followOne(r.Context(), user, author); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *anchorServer) unfollow(w http.ResponseWriter, r *http.Request) error {
	user, ok1 := pathID(r, "id")
	author, ok2 := pathID(r, "author_id")
	if !ok1 || !ok2 || user == author {
		return bad(400, "bad ids or a self-unfollow")
	}
	ctx := r.Context()
	posts, err := s.rdb.ZRange(ctx, s.keys.posts(author), 0, -1).Result()
	if err != nil {
		return err
	}
	pipe := s.rdb.Pipeline()
	pipe.SRem(ctx, s.keys.following(user), author)
	pipe.SRem(ctx, s.keys.followers(author), user)
	if len(posts) > 0 {
		members := make([]any, len(posts))
		for i, p := range posts {
			members[i] = p
		}
		pipe.ZRem(ctx, s.keys.feed(user), members...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *anchorServer) follows(w http.ResponseWriter, r *http.Request) error {
	var in struct {
		Follows []struct {
			UserID   json.Number `json:"user_id"`
			AuthorID json.Number `json:"author_id"`
		} `json:"follows"`
	}
	dec := json.NewDecoder(r.Body)
	dec.UseNumber()
	if err := dec.Decode(&in); err != nil || len(in.Follows) == 0 || len(in.Follows) > 1000 {
		return bad(400, "bad body")
	}
	type result struct {
		UserID   string `json:"user_id"`
		AuthorID string `json:"author_id"`
		Status   string `json:"status"`
	}
	out := make([]result, len(in.Follows))
	for i, f := range in.Follows {
		u, err1 := strconv.ParseUint(f.UserID.String(), 10, 64)
		a, err2 := strconv.ParseUint(f.AuthorID.String(), 10, 64)
		out[i] = result{UserID: f.UserID.String(), AuthorID: f.AuthorID.String(), Status: "error"}
		if err1 != nil || err2 != nil || u == 0 || a == 0 || u == a {
			continue
		}
		created, err := s.followOne(r.Context(), u, a)
		switch {
		case err != nil:
		case created:
			out[i].Status = "created"
		default:
			out[i].Status = "exists"
		}
	}
	writeJSON(w, 200, map[string]any{"results": out})
	return nil
}

// anchor is a running anchor process.
type anchor struct {
	*child
	addr     string // host:port
	redisPID int    // the redis-server's process; 0 if not on this machine
	rdb      *redis.Client
	keys     anchorKeys
	log      func(msg string, args ...any)
}

// startAnchor starts the anchor on keys of the run's own (tag tells the
// phases apart) and finds the redis-server's process.
func (b *bench) startAnchor(ctx context.Context, tag string) (*anchor, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	keys := anchorKeys("feedbench:" + b.rep.Database + ":" + tag + ":")
	rdb := redis.NewClient(&redis.Options{Addr: b.opt.RedisAddr})
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("the Redis anchor needs a Redis server at -redis-addr %s: %w", b.opt.RedisAddr, err)
	}
	c, addr, err := startChild("redis anchor", self, []string{anchorCommand, "-redis", b.opt.RedisAddr, "-prefix", string(keys),
		"-inbox-limit", strconv.Itoa(b.stack.svc.Config().InboxLimit)}, b.opt.ServerProcs, true)
	if err != nil {
		rdb.Close()
		return nil, err
	}
	a := &anchor{child: c, addr: addr, rdb: rdb, keys: keys, log: b.log.Warn, redisPID: redisPID(ctx, rdb)}
	b.log.Info("feedbench: Redis anchor started", "addr", addr, "pid", c.pid(), "redis_pid", a.redisPID)
	return a, nil
}

// redisPID is the process id the Redis server reports, if that process is
// a redis-server on this machine; else 0.
func redisPID(ctx context.Context, rdb *redis.Client) int {
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			pid, err := strconv.Atoi(v)
			if _, comm, cerr := pidCPU(pid); err == nil && cerr == nil && comm == "redis-server" {
				return pid
			}
		}
	}
	return 0
}

// close stops the anchor and deletes its keys.
func (a *anchor) close() {
	if err := a.stop(); err != nil {
		a.log("feedbench: Redis anchor", "err", err)
	}
	ctx := context.Background()
	iter := a.rdb.Scan(ctx, 0, string(a.keys)+"*", 1000).Iterator()
	var batch []string
	for iter.Next(ctx) {
		if batch = append(batch, iter.Val()); len(batch) == 1000 {
			a.rdb.Unlink(ctx, batch...)
			batch = batch[:0]
		}
	}
	if len(batch) > 0 {
		a.rdb.Unlink(ctx, batch...)
	}
	a.rdb.Close()
}
