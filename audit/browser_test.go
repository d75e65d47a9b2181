package audit

import (
	"context"
	"fmt"
	"html"
	"math"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The browser tests render the viewer's pages in a headless Chromium and read the DOM
// it dumps once the page's script has run. MEMPO_CHROMIUM names the browser (make test
// sets it from build/chromium.sh); otherwise the first of chromium, chromium-browser and
// google-chrome on PATH is used, and without one the tests skip.

// chromium returns the browser to run, or skips the test saying why there is none.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("MEMPO_CHROMIUM"); p != "" {
		bin, err := exec.LookPath(p)
		if err != nil {
			t.Fatalf("MEMPO_CHROMIUM=%s: %v", p, err)
		}
		return bin
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no chromium, chromium-browser or google-chrome on PATH (nor MEMPO_CHROMIUM): the headless page checks are skipped")
	return ""
}

// page serves a viewer for one browser test.
type page struct {
	t   *testing.T
	bin string
	srv *httptest.Server
}

// newPage serves v to the browser bin (from chromium, called before any run is made,
// so a test without a browser skips at once).
func newPage(t *testing.T, bin string, v *Server) *page {
	srv := httptest.NewServer(v)
	t.Cleanup(srv.Close)
	return &page{t: t, bin: bin, srv: srv}
}

// dom loads the page at fragment (a "#/view?…" URL) and returns the DOM serialized
// after the script had 5 s of virtual time to fetch and render.
func (p *page) dom(fragment string) string {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	u := p.srv.URL + "/" + fragment
	out, err := exec.CommandContext(ctx, p.bin, "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run",
		"--user-data-dir="+p.t.TempDir(), "--virtual-time-budget=5000", "--dump-dom", u).Output()
	if err != nil {
		p.t.Fatalf("%s --dump-dom %s: %v", p.bin, u, err)
	}
	dom := string(out)
	if strings.Contains(dom, "Cannot show this page") || strings.Contains(dom, "<p>Loading…</p>") {
		p.t.Fatalf("%s did not render:\n%.3000s", fragment, dom)
	}
	return dom
}

// TestBrowser renders the question page holding model text that is markup and checks
// the text arrived as text: the DOM holds it escaped and no script element came from it.
func TestBrowser(t *testing.T) {
	bin := chromium(t)
	_, v := testRun(t)
	dom := newPage(t, bin, v).dom("#/question?" + q("group", "mempo/iter-1", "uid", "q00000"))
	if !strings.Contains(dom, "q00000") || !strings.Contains(dom, "trajectories") {
		t.Fatalf("the page did not render the question:\n%.2000s", dom)
	}
	if !strings.Contains(dom, "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Errorf("the DOM lacks the model text as escaped text:\n%.2000s", dom)
	}
	if strings.Contains(dom, "<script>alert(1)") {
		t.Errorf("the DOM holds the model text as a script element")
	}
}

// TestBrowserDataset renders a dataset's page and checks its timings table lists the
// manifest's total and each phase of the stage's work.
func TestBrowserDataset(t *testing.T) {
	bin := chromium(t)
	_, v := testRun(t)
	dom := newPage(t, bin, v).dom("#/dataset?path=" + url.QueryEscape("mempo/iter-1/rollouts"))
	for _, want := range []string{`<td>total</td><td class="num">12.5</td>`, `<td>generate</td><td class="num">11</td>`,
		`<td>retrieve</td><td class="num">1.5</td>`} {
		if !strings.Contains(dom, want) {
			t.Errorf("the dataset page lacks %s", want)
		}
	}
}

// TestBrowserOverview renders the run page and checks it lists every dataset of the
// test run, links each iteration's questions and fills in the mean rewards it fetches
// after showing the page.
func TestBrowserOverview(t *testing.T) {
	bin := chromium(t)
	_, v := testRun(t)
	dom := newPage(t, bin, v).dom("#/")
	want := []string{"task/prompts"}
	for it := 1; it <= 2; it++ {
		for _, k := range []string{"rollouts", "scores", "logprobs", "advantages"} {
			want = append(want, fmt.Sprintf("mempo/iter-%d/%s", it, k))
		}
	}
	for _, d := range want {
		if !strings.Contains(dom, `<a href="#/dataset?path=`+url.QueryEscape(d)+`">`+d+`</a>`) {
			t.Errorf("the run page lists no dataset %s", d)
		}
	}
	for _, g := range []string{"mempo/iter-1", "mempo/iter-2"} {
		if !strings.Contains(dom, `<a href="#/questions?group=`+url.QueryEscape(g)+`">`+g+`</a>`) {
			t.Errorf("the run page links no questions of %s", g)
		}
	}
	// Rewards are s%2 over samples 0..3, and sample 2 has an invalid format.
	if n := strings.Count(dom, "0.500 (ok 0.75)"); n != 2 {
		t.Errorf("the run page shows the mean reward of %d groups, want 2", n)
	}
	if t.Failed() {
		t.Logf("DOM:\n%.4000s", dom)
	}
}

// tokRe matches one token of the token view with its attributes and (escaped) text.
var tokRe = regexp.MustCompile(`<span class="tok[^"]*"([^>]*\bdata-i="[^>]*)>([^<]*)</span>`)

// domToken is one token span of the token view as the browser rendered it.
type domToken struct {
	i      int
	class  string
	adv, v string // data-adv, data-v ("" when absent)
	mem    bool   // data-mem
	bg     string // the background colour, "rgb(r, g, b)" ("" when none)
	text   string // unescaped
}

func attr(attrs, name string) (string, bool) {
	m := regexp.MustCompile(`\b` + regexp.QuoteMeta(name) + `="([^"]*)"`).FindStringSubmatch(attrs)
	if m == nil {
		return "", false
	}
	return html.UnescapeString(m[1]), true
}

func domTokens(t *testing.T, dom string) []domToken {
	t.Helper()
	var toks []domToken
	for _, m := range tokRe.FindAllStringSubmatch(dom, -1) {
		full := m[0]
		d := domToken{text: html.UnescapeString(m[2])}
		d.class, _ = attr(full, "class")
		i, _ := attr(m[1], "data-i")
		var err error
		if d.i, err = strconv.Atoi(i); err != nil {
			t.Fatalf("token %s: data-i %q", full, i)
		}
		d.adv, _ = attr(m[1], "data-adv")
		d.v, _ = attr(m[1], "data-v")
		_, d.mem = attr(m[1], "data-mem")
		if st, ok := attr(m[1], "style"); ok {
			if c := regexp.MustCompile(`background-color:\s*(rgb\([^)]*\))`).FindStringSubmatch(st); c != nil {
				d.bg = c[1]
			}
		}
		toks = append(toks, d)
	}
	return toks
}

// advColor is app.js's color(v, scale): white at 0, shading to red at +scale and to
// blue at −scale. Each step is rounded to float64 as JavaScript does (no fused ops).
func advColor(v, scale float64) string {
	x := math.Max(-1, math.Min(1, v/scale))
	ax := math.Abs(x)
	mix := func(a float64) int { d := float64((a - 255) * ax); return int(math.Round(255 + d)) }
	if x >= 0 {
		return fmt.Sprintf("rgb(%d, %d, %d)", mix(230), mix(70), mix(60))
	}
	return fmt.Sprintf("rgb(%d, %d, %d)", mix(60), mix(110), mix(230))
}

// TestBrowserTokens renders the token view of turns with a memory and checks each
// token carries the dataset's per-token advantage, is coloured by it on the page's
// scale (red for positive, blue for negative, saturated at the largest magnitude), and
// that exactly the tokens in [mem_start, mem_end) are marked as the <mem> span.
func TestBrowserTokens(t *testing.T) {
	bin := chromium(t)
	_, v := testRun(t)
	p := newPage(t, bin, v)
	for _, c := range []struct{ sample, turn int }{{0, 1}, {3, 2}} {
		t.Run(fmt.Sprintf("sample%d-turn%d", c.sample, c.turn), func(t *testing.T) {
			params := q("group", "mempo/iter-1", "uid", "q00001", "sample", strconv.Itoa(c.sample), "turn", strconv.Itoa(c.turn))
			code, _, body := get(t, v, "/api/tokens?"+params)
			if code != 200 {
				t.Fatalf("/api/tokens: %d %s", code, body)
			}
			api := decode[Tokens](t, body)
			dom := p.dom("#/tokens?" + params)
			toks := domTokens(t, dom)
			if len(toks) != len(api.Tokens) || len(toks) == 0 {
				t.Fatalf("%d token elements, want %d:\n%.3000s", len(toks), len(api.Tokens), dom)
			}
			if api.MemStart != 0 || api.MemEnd <= 0 || int(api.MemEnd) >= len(toks) {
				t.Fatalf("memory span [%d, %d) of %d tokens: the test wants a turn with a memory", api.MemStart, api.MemEnd, len(toks))
			}
			// The page's scale is the largest |advantage| of the turn.
			var scale float64
			for _, d := range toks {
				x, err := strconv.ParseFloat(d.adv, 64)
				if err != nil {
					t.Fatalf("token %d: data-adv %q", d.i, d.adv)
				}
				scale = math.Max(scale, math.Abs(x))
			}
			var memText, all strings.Builder
			for i, d := range toks {
				if d.i != i {
					t.Fatalf("token element %d has data-i %d", i, d.i)
				}
				// makeRun's advantages: sample − 0.5 + 0.01·i.
				want := float32(c.sample) - 0.5 + 0.01*float32(i)
				got, err := strconv.ParseFloat(d.adv, 32)
				if err != nil || float32(got) != want {
					t.Errorf("token %d: data-adv %q, want %v", i, d.adv, want)
				}
				if d.v != d.adv {
					t.Errorf("token %d: coloured by %q, want the advantage %q", i, d.v, d.adv)
				}
				x, _ := strconv.ParseFloat(d.adv, 64)
				if w := advColor(x, scale); d.bg != w {
					t.Errorf("token %d (advantage %s, scale %v): background %q, want %q", i, d.adv, scale, d.bg, w)
				}
				var r, g, b int
				if _, err := fmt.Sscanf(d.bg, "rgb(%d, %d, %d)", &r, &g, &b); err == nil {
					if x > 0 && !(r > b) || x < 0 && !(b > r) {
						t.Errorf("token %d: advantage %s coloured %s, want red for positive, blue for negative", i, d.adv, d.bg)
					}
					if math.Abs(x) == scale && (min(r, g, b) > 110) {
						t.Errorf("token %d: the largest |advantage| %s is coloured %s, want the saturated end", i, d.adv, d.bg)
					}
				}
				inMem := int32(i) >= api.MemStart && int32(i) < api.MemEnd
				if d.mem != inMem || strings.Contains(" "+d.class+" ", " mem ") != inMem {
					t.Errorf("token %d %q: data-mem %v class %q, want the <mem> mark %v (span [%d, %d))", i, d.text, d.mem, d.class, inMem, api.MemStart, api.MemEnd)
				}
				if inMem {
					memText.WriteString(d.text)
				}
				all.WriteString(d.text)
			}
			if want := "<mem>" + memoryOf(1, c.sample, c.turn) + "</mem>"; memText.String() != want {
				t.Errorf("the marked tokens read %q, want the memory %q", memText.String(), want)
			}
			if all.String() != api.Response {
				t.Errorf("the tokens read %q, want the response %q", all.String(), api.Response)
			}
		})
	}
}

// inject is markup a model could write: an element with an event handler and a script.
// It avoids the gold aliases, so highlighting does not split it.
const inject = "<img src=x onerror=document.title=1><script>document.title=2</script>"

// tagRe finds every start tag of a serialized DOM.
var tagRe = regexp.MustCompile(`<([a-zA-Z][a-zA-Z0-9-]*)`)

// pageTags are the elements index.html and app.js create; model text must add none.
var pageTags = map[string]bool{}

func init() {
	for _, s := range strings.Fields(`html head meta title link script body header nav main a p h1 h2 h3 div span code pre
		details summary table thead tbody tr th td mark form label input button select option`) {
		pageTags[s] = true
	}
}

// TestBrowserInjection renders every view that shows model text, from a run whose
// memories, queries, observations, responses and answer are markup, and checks the
// markup arrived as text everywhere and made no element.
func TestBrowserInjection(t *testing.T) {
	bin := chromium(t)
	dir := t.TempDir()
	makeRun(t, dir, spec{questions: 1, samples: 2, turns: 2, shards: 1, iters: 2, tokenizer: true, inject: inject})
	v, err := New(Config{Run: dir}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	p := newPage(t, bin, v)
	esc := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(inject)
	for _, c := range []struct {
		name, fragment string
		min            int      // the least number of times the escaped text shows
		contexts       []string // escaped surroundings that must show
	}{
		// Two turns: memory 2, query 2, observation 1, response 2×2, answer 1.
		{"question", "#/question?" + q("group", "mempo/iter-1", "uid", "q00000"), 10,
			[]string{"&lt;information&gt;" + esc + "&lt;/information&gt;", "&lt;mem&gt;" + esc + "&lt;/mem&gt;&lt;search&gt;" + esc}},
		// The response text under the tokens holds it twice.
		{"tokens", "#/tokens?" + q("group", "mempo/iter-1", "uid", "q00000", "sample", "1", "turn", "0"), 2,
			[]string{"&lt;mem&gt;" + esc + "&lt;/mem&gt;&lt;search&gt;" + esc + "&lt;/search&gt;"}},
		{"tokens-answer", "#/tokens?" + q("group", "mempo/iter-2", "uid", "q00000", "sample", "1", "turn", "1"), 2,
			[]string{"&lt;answer&gt;" + esc + "&lt;/answer&gt;"}},
		// Two iterations: the answer and the last memory of each.
		{"compare", "#/compare?" + q("series", "mempo", "uid", "q00000"), 4, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			dom := p.dom(c.fragment)
			if n := strings.Count(dom, esc); n < c.min {
				t.Errorf("the escaped model text shows %d times, want at least %d", n, c.min)
			}
			for _, s := range c.contexts {
				if !strings.Contains(dom, s) {
					t.Errorf("the DOM lacks %q", s)
				}
			}
			tags := map[string]int{}
			for _, m := range tagRe.FindAllStringSubmatch(dom, -1) {
				tags[strings.ToLower(m[1])]++
			}
			for tag, n := range tags {
				if !pageTags[tag] {
					t.Errorf("the DOM holds %d <%s> elements, which the page never makes", n, tag)
				}
			}
			if tags["script"] != 1 || tags["img"] != 0 {
				t.Errorf("the DOM holds %d script and %d img elements, want 1 (app.js) and 0", tags["script"], tags["img"])
			}
			if !strings.Contains(dom, "<title>mempo view</title>") {
				t.Errorf("the document title changed")
			}
			if strings.Contains(c.name, "tokens") {
				var all strings.Builder
				for _, d := range domTokens(t, dom) {
					all.WriteString(d.text)
				}
				if !strings.Contains(all.String(), inject) {
					t.Errorf("the tokens read %q, want the model text %q in them", all.String(), inject)
				}
			}
			if t.Failed() {
				t.Logf("DOM:\n%.5000s", dom)
			}
		})
	}
}
