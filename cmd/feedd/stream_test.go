package main

import (
	"context"
	"testing"
	"time"

	"github.com/feedhq/feed/httpapi/client"
	"github.com/feedhq/feed/store/storetest"
)

// TestStreamAcrossRestart streams a feed from one feedd, stops it (its
// streams must end, or Close would wait for them), publishes through a
// second feedd on the same database and resumes there with Last-Event-ID:
// exactly the posts published meanwhile arrive, oldest first.
func TestStreamAcrossRestart(t *testing.T) {
	t.Parallel()
	dsn := storetest.DatabaseDSN(t)
	const token = "tok-5e77"
	const user = 100
	first, _ := startMain(t, serveArgs(dsn, "--api-token", token)...)
	c := newClient(t, first, token)
	ctx := t.Context()
	_, _, err := c.Publish(ctx, user, client.PublishRequest{})
	must(t, err)
	start, err := c.Feed(ctx, user, 1, "")
	must(t, err)
	p, _, err := c.Publish(ctx, user, client.PublishRequest{})
	must(t, err)
	events, err := c.StreamFeed(ctx, user, client.StreamRequest{Since: *start.TopCursor})
	must(t, err)
	e := nextEvent(t, events)
	if e.Post != p {
		t.Fatalf("event %+v, want %+v", e.Post, p)
	}
	lastID := e.ID

	must(t, first.Close())
	select {
	case _, open := <-events:
		if open {
			t.Fatal("an event after the server closed")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the stream did not end when feedd stopped")
	}

	second, _ := startMain(t, serveArgs(dsn, "--api-token", token)...)
	c = newClient(t, second, token)
	var later []client.Post
	for range 3 {
		p, _, err := c.Publish(ctx, user, client.PublishRequest{})
		must(t, err)
		later = append(later, p)
	}
	events, err = c.StreamFeed(ctx, user, client.StreamRequest{LastEventID: lastID, TokenInQuery: true})
	must(t, err)
	for i, want := range later {
		if e := nextEvent(t, events); e.Post != want {
			t.Fatalf("resumed event %d: %+v, want %+v", i, e.Post, want)
		}
	}
	if _, err := c.StreamFeed(context.Background(), user, client.StreamRequest{LastEventID: "nope"}); err == nil {
		t.Fatal("a malformed Last-Event-ID opened a stream")
	}
}

// nextEvent waits for a stream's next event; the wait only bounds a
// failing test.
func nextEvent(t *testing.T, events <-chan client.Event) client.Event {
	t.Helper()
	var e client.Event
	select {
	case ev, ok := <-events:
		if !ok {
			t.Fatal("the stream ended")
		}
		e = ev
	case <-time.After(30 * time.Second):
		t.Fatal("no event within 30 s")
	}
	return e
}
