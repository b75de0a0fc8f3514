//go:build console

// Package browser_test drives the console in headless Chromium against a
// real feedd and a real database: `make test-console` runs it (the build
// tag keeps the browser out of `go test ./...`). It saves the screenshots
// README shows to docs/img.
package browser_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/feedhq/feed"
	"github.com/feedhq/feed/internal/wait"
	"github.com/feedhq/feed/store"
	"github.com/feedhq/feed/store/shardmap"
	"github.com/feedhq/feed/store/storeload"
	"github.com/feedhq/feed/store/storetest"
)

const (
	token = "console-test-token"
	// The reader, the authors it follows (posts each), the author with
	// many followers and the author whose delivery is left stuck.
	reader       = 50
	postsEach    = 9
	bigAuthor    = 500
	bigFollowers = 200
	stuckAuthor  = 900
	stuckPost    = 9000
)

var followed = []uint64{60, 61, 62}

// screenshots is where the pictures README shows are written.
const screenshots = "../../../docs/img"

// feedd is a running feedd process and a client of its API.
type feedd struct {
	base string
}

// TestConsoleInBrowser opens every page, pages a user's feed and checks it
// against the API, watches a delivery to 200 followers reach done on the
// open deliveries page without a reload, and retries a stuck task from the
// keyboard.
func TestConsoleInBrowser(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	dsn := storetest.DatabaseDSN(t)
	leaveStuckDelivery(ctx, t, dsn)
	f := startFeedd(ctx, t, dsn)
	f.seed(t)

	bctx, cancel := chromedp.NewContext(ctx, chromedp.WithAllocatorOptions(
		chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1280, 900)))
	defer cancel()
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(bctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}

	// The console asks for the token first.
	do("sign in", chromedp.Navigate(f.base+"/console"),
		chromedp.WaitVisible(chromedp.CSS(`#token`)),
		chromedp.SendKeys(chromedp.CSS(`#token`), token),
		chromedp.Submit(chromedp.CSS(`#token`)),
		chromedp.WaitVisible(chromedp.CSS(`#db-main`)))

	// The reader's feed, page by page, is the API's.
	do("user page", chromedp.Navigate(fmt.Sprintf("%s/console/users/%d", f.base, reader)),
		chromedp.WaitVisible(chromedp.CSS(`tr.item`)))
	shoot(bctx, t, "console-user.png")
	cursor := ""
	for pageNo := 1; ; pageNo++ {
		want, next := f.feedPage(t, cursor)
		if len(want) == 0 {
			t.Fatalf("feed page %d is empty", pageNo)
		}
		do("feed page", chromedp.WaitVisible(chromedp.CSS(`tr.item[data-content-id="`+want[0]+`"]`)))
		shown, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("tr.item")].map(e => e.dataset.contentId)`))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(shown, want) {
			t.Fatalf("feed page %d: the console shows %v, the API %v", pageNo, shown, want)
		}
		if next == "" {
			if pageNo < 2 {
				t.Fatalf("the reader's feed has %d page(s), want at least 2", pageNo)
			}
			break
		}
		cursor = next
		do("next page", chromedp.Click(chromedp.CSS(`#next-page`)))
	}

	// A delivery to 200 followers reaches done on the open page.
	do("deliveries page", chromedp.Navigate(f.base+"/console/deliveries"),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#stuck-%d-0`, stuckPost))))
	if _, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`window.sameDocument = true`)); err != nil {
		t.Fatal(err)
	}
	post := f.publish(t, bigAuthor)
	row := fmt.Sprintf(`#delivery-%d`, post)
	do("delivery done", chromedp.WaitVisible(chromedp.CSS(row+`[data-state="done"]`)))
	if same, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`window.sameDocument === true`)); err != nil || !same {
		t.Fatalf("the page was reloaded (%v)", err)
	}
	delivered, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(row+` .delivered`)))
	if err != nil || delivered != strconv.Itoa(bigFollowers) {
		t.Fatalf("delivered %q, want %d (%v)", delivered, bigFollowers, err)
	}
	shoot(bctx, t, "console-deliveries.png")

	// The stuck task, retried from the keyboard, is finished by feedd.
	retry := fmt.Sprintf(`#stuck-%d-0 button.retry`, stuckPost)
	do("retry", chromedp.Focus(chromedp.CSS(retry)), chromedp.KeyEvent("\r"),
		chromedp.WaitVisible(chromedp.CSS(`.flash`)),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#delivery-%d[data-state="done"]`, stuckPost))),
		chromedp.WaitVisible(chromedp.CSS(`#no-stuck`)))

	// The overview draws its charts once a sample is taken.
	do("overview", chromedp.Navigate(f.base+"/console"),
		chromedp.WaitVisible(chromedp.CSS(`.chart svg`)))
	shoot(bctx, t, "console-overview.png")
	do("reshard page", chromedp.Navigate(f.base+"/console/reshard"),
		chromedp.WaitVisible(chromedp.CSS(`#inforce-h`)))
	shoot(bctx, t, "console-reshard.png")

	// At phone width, in dark mode.
	do("phone", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2)),
		chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := cdp.Call(ctx, tg, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
				Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}}})
			return err
		}),
		chromedp.Navigate(f.base+"/console"),
		chromedp.WaitVisible(chromedp.CSS(`.chart svg`)))
	shoot(bctx, t, "console-phone-dark.png")
}

// leaveStuckDelivery lays the schema, records the layout as feedd will,
// and leaves a delivery whose task three workers died on, before any
// feedd runs.
func leaveStuckDelivery(ctx context.Context, t *testing.T, dsn string) {
	t.Helper()
	st, err := store.Open(shardmap.Single(dsn))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Migrate(ctx, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	if err := st.CheckLayout(ctx); err != nil {
		t.Fatal(err)
	}
	var followers []uint64
	for u := uint64(stuckAuthor + 1); u <= stuckAuthor+10; u++ {
		followers = append(followers, u)
	}
	if err := storeload.Followers(ctx, st, stuckAuthor, followers, time.Now().UnixMilli(), false); err != nil {
		t.Fatal(err)
	}
	post := feed.Post{AuthorID: stuckAuthor, ContentID: stuckPost, PublishTime: time.Now().UnixMilli(), Kind: feed.KindPost}
	if err := storetest.StuckDelivery(ctx, st, post); err != nil {
		t.Fatal(err)
	}
}

// startFeedd builds feedd and serves the database with a token, until the
// test ends; its log is printed if the test fails.
func startFeedd(ctx context.Context, t *testing.T, dsn string) *feedd {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "feedd")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/feedhq/feed/cmd/feedd").CombinedOutput(); err != nil {
		t.Fatalf("build feedd: %v\n%s", err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	logPath := filepath.Join(dir, "feedd.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", "--mysql-dsn", dsn, "--http-addr", addr, "--api-token", token,
		"--poll-interval", "100ms", "--drain-delay", "0s", "--push-threshold", "100")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		logFile.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("feedd's log:\n%s", b)
		}
	})
	f := &feedd{base: "http://" + addr}
	wait.For(t, "feedd ready", func() error {
		resp, err := http.Get(f.base + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("readyz %d", resp.StatusCode)
		}
		return nil
	})
	return f
}

// call sends an API request with the token and decodes the JSON answer
// into out (nil: none expected).
func (f *feedd) call(t *testing.T, method, path string, body, out any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, f.base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
	}
}

// publish publishes a post with a server-assigned id and returns the id.
func (f *feedd) publish(t *testing.T, author uint64) uint64 {
	t.Helper()
	var p struct {
		ContentID string `json:"content_id"`
	}
	f.call(t, http.MethodPost, fmt.Sprintf("/v1/users/%d/posts", author), map[string]string{}, &p)
	id, err := strconv.ParseUint(p.ContentID, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// feedPage returns the content ids of the reader's feed page at cursor,
// as the console pages it, and the next cursor.
func (f *feedd) feedPage(t *testing.T, cursor string) ([]string, string) {
	t.Helper()
	var page struct {
		Items []struct {
			ContentID string `json:"content_id"`
		} `json:"items"`
		Next *string `json:"next_cursor"`
	}
	path := fmt.Sprintf("/v1/users/%d/feed?limit=20", reader)
	if cursor != "" {
		path += "&cursor=" + cursor
	}
	f.call(t, http.MethodGet, path, nil, &page)
	var ids []string
	for _, it := range page.Items {
		ids = append(ids, it.ContentID)
	}
	next := ""
	if page.Next != nil {
		next = *page.Next
	}
	return ids, next
}

// seed makes the reader follow three authors with posts each and the big
// author, gives the big author its followers, and waits until the follows
// are applied and the posts delivered.
func (f *feedd) seed(t *testing.T) {
	t.Helper()
	for _, a := range append(slices.Clone(followed), bigAuthor) {
		f.call(t, http.MethodPut, fmt.Sprintf("/v1/users/%d/following/%d", reader, a), nil, nil)
	}
	for u := uint64(1000); u < 1000+bigFollowers-1; u++ {
		f.call(t, http.MethodPut, fmt.Sprintf("/v1/users/%d/following/%d", u, bigAuthor), nil, nil)
	}
	var last uint64
	for range postsEach {
		for _, a := range followed {
			last = f.publish(t, a)
		}
	}
	wait.For(t, "the seeding settled", func() error {
		d, n := f.delivery(t, followed[len(followed)-1], last), f.followers(t, bigAuthor)
		if d.State != feed.DeliveryDone || n != bigFollowers {
			return fmt.Errorf("last delivery %+v, %d followers", d, n)
		}
		return nil
	})
	// Past the push threshold the big author switches to pull mode; its
	// posts from then on skip the reader, who has not read yet, and the
	// reader's feed merges them from its outbox.
	wait.For(t, "the big author in pull mode", func() error {
		post := f.publish(t, bigAuthor)
		var d delivery
		wait.For(t, fmt.Sprintf("the delivery of %d", post), func() error {
			if d = f.delivery(t, bigAuthor, post); d.State != feed.DeliveryDone {
				return fmt.Errorf("delivery %+v", d)
			}
			return nil
		})
		if d.Mode != feed.ModePushActive {
			return fmt.Errorf("post %d delivered in mode %s", post, d.Mode)
		}
		return nil
	})
}

type delivery struct {
	State string `json:"state"`
	Mode  string `json:"mode"`
}

func (f *feedd) delivery(t *testing.T, author, post uint64) delivery {
	t.Helper()
	var d delivery
	f.call(t, http.MethodGet, fmt.Sprintf("/v1/users/%d/posts/%d/delivery", author, post), nil, &d)
	return d
}

// followers counts the author's followers as the API lists them.
func (f *feedd) followers(t *testing.T, author uint64) int {
	t.Helper()
	n, cursor := 0, ""
	for {
		var page struct {
			Items []json.RawMessage `json:"items"`
			Next  *string           `json:"next_cursor"`
		}
		path := fmt.Sprintf("/v1/users/%d/followers?limit=100", author)
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		f.call(t, http.MethodGet, path, nil, &page)
		n += len(page.Items)
		if page.Next == nil {
			return n
		}
		cursor = *page.Next
	}
}

// shoot saves a screenshot of the whole page to docs/img.
func shoot(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(screenshots, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
}
