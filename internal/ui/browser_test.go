package ui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/eventmq/emq/admin"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/internal/testutil"
)

// The dashboard, driven in a real browser: Debian's chromium (.ci/run
// installs it). Without one the tests skip, unless EMQ_REQUIRE_BROWSER is
// set (CI sets it). EMQ_UI_SCREENSHOTS=DIR saves each page's picture
// there (make screenshots: docs/ui).

func chromium(t testing.TB) string {
	t.Helper()
	for _, name := range []string{os.Getenv("EMQ_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"} {
		if name == "" {
			continue
		}
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	testutil.Missing(t, "EMQ_REQUIRE_BROWSER", "no chromium found; apt-get install -y chromium to run the dashboard's tests")
	return ""
}

// tab is one browser tab on the dashboard at base.
type tab struct {
	t    testing.TB
	ctx  context.Context
	base string
	mu   sync.Mutex
	errs []string // console errors and uncaught exceptions
}

func newTab(t testing.TB, base string) *tab {
	t.Helper()
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromium(t)), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900), chromedp.Flag("disable-dev-shm-usage", true))
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	tb := &tab{t: t, ctx: ctx, base: base}
	if err := chromedp.Do(ctx); err != nil { // start the browser
		t.Fatalf("chromium: %v", err)
	}
	msgs := chromedp.Console(ctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleException {
				tb.mu.Lock()
				tb.errs = append(tb.errs, fmt.Sprintf("%s %s:%d: %s", m.Type, m.URL, m.Line+1, m.Text))
				tb.mu.Unlock()
			}
		}
	}()
	return tb
}

func (tb *tab) do(actions ...chromedp.Action[chromedp.Void]) {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, bt.Wait)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		tb.t.Fatalf("browser: %v", err)
	}
}

// open shows a page of the dashboard (a hash route, "" = the overview).
func (tb *tab) open(route string) {
	tb.t.Helper()
	tb.do(chromedp.Navigate(tb.base + "/ui/#/" + route))
}

// eval runs a JavaScript expression and decodes its value (a promise's
// once it settles).
func eval[T any](tb *tab, js string) T {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, bt.Wait)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js, chromedp.EvalAwaitPromise))
	if err != nil {
		tb.t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// until waits for a JavaScript condition to hold.
func (tb *tab) until(what, js string) {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, bt.Wait)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void]("!!("+js+")", chromedp.WithPollingTimeout(bt.Wait))); err != nil {
		tb.mu.Lock()
		errs := tb.errs
		tb.mu.Unlock()
		body := eval[string](tb, `document.body.innerText`)
		tb.t.Fatalf("%s: not within %v (%v)\npage: %s\nconsole: %q", what, bt.Wait, err, body, errs)
	}
}

// texts are the texts of the elements sel matches.
func (tb *tab) texts(sel string) []string {
	tb.t.Helper()
	js, _ := json.Marshal(sel)
	return eval[[]string](tb, fmt.Sprintf(`[...document.querySelectorAll(%s)].map(e => e.textContent.trim())`, js))
}

// click clicks the element sel once it is there and shown (the pages
// redraw parts of themselves as the broker's numbers come).
func (tb *tab) click(sel string) {
	tb.t.Helper()
	js, _ := json.Marshal(sel)
	tb.until("click "+sel, fmt.Sprintf(`((s) => { const e = document.querySelector(s); if (!e || !e.checkVisibility()) return false; e.click(); return true; })(%s)`, js))
}

// fill sets the value of the input sel, as typing would.
func (tb *tab) fill(sel, value string) {
	tb.t.Helper()
	js, _ := json.Marshal([]string{sel, value})
	tb.until("the input "+sel, fmt.Sprintf(`((a) => { const e = document.querySelector(a[0]); if (e) e.value = a[1]; return e; })(%s)`, js))
}

// takeErrors returns the console's errors so far and forgets them.
func (tb *tab) takeErrors() []string {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	errs := tb.errs
	tb.errs = nil
	return errs
}

func (tb *tab) noErrors() {
	tb.t.Helper()
	for _, e := range tb.takeErrors() {
		tb.t.Errorf("console: %s", e)
	}
}

// shot saves the page's picture as NAME.png in $EMQ_UI_SCREENSHOTS.
func (tb *tab) shot(name string) {
	tb.t.Helper()
	dir := os.Getenv("EMQ_UI_SCREENSHOTS")
	if dir == "" {
		return
	}
	ctx, cancel := context.WithTimeout(tb.ctx, bt.Wait)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		tb.t.Fatalf("screenshot: %v", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		tb.t.Fatal(err)
	}
}

// viewport sets the tab's width and height and its colour scheme.
func (tb *tab) viewport(width, height int64, scheme string) {
	tb.t.Helper()
	tb.do(chromedp.EmulateViewport(width, height), func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := cdp.Call(ctx, t, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}}})
		return chromedp.Void{}, err
	})
}

// adminAPI calls the broker's admin API as a program does.
func adminAPI(t testing.TB, b *bt.Broker, method, path, token string, out any) int {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+b.AdminAddr()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(admin.Header, "test")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Timeout: bt.Wait}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if out != nil && resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
	}
	return resp.StatusCode
}

func sel(format string, args ...any) string { return fmt.Sprintf(format, args...) }

func contains(list []string, s string) bool {
	for _, x := range list {
		if strings.Contains(x, s) {
			return true
		}
	}
	return false
}
