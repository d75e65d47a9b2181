package audit

import (
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/mempo/mempo/format"
)

// quiet drops the viewer's logs of refused requests, which these tests make on purpose.
var quiet = slog.New(slog.DiscardHandler)

// shared is the run of the tests that only read: made once, removed by TestMain.
var shared struct {
	once sync.Once
	dir  string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, dir := range []string{shared.dir, benchRun.dir} {
		if dir != "" {
			os.RemoveAll(dir)
		}
	}
	os.Exit(code)
}

// testRun returns a small run (3 questions × 4 samples × 3 turns, two iterations, a
// tokenizer) and a viewer over it. Tests that change the run pass mine and get their
// own copy; the others share one.
func testRun(t *testing.T, mine ...bool) (string, *Server) {
	t.Helper()
	sp := spec{questions: 3, samples: 4, turns: 3, shards: 2, iters: 2, tokenizer: true}
	var dir string
	if len(mine) > 0 && mine[0] {
		dir = t.TempDir()
		makeRun(t, dir, sp)
	} else {
		shared.once.Do(func() {
			if shared.dir, shared.err = os.MkdirTemp("", "view-test-"); shared.err == nil {
				makeRun(t, shared.dir, sp)
			}
		})
		if shared.err != nil {
			t.Fatal(shared.err)
		}
		dir = shared.dir
	}
	v, err := New(Config{Run: dir}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	return dir, v
}

// get answers one request to the viewer as a loopback client would send it.
func get(t testing.TB, v http.Handler, path string) (int, http.Header, []byte) {
	r := httptest.NewRequest(http.MethodGet, "http://127.0.0.1:8080"+path, nil)
	w := httptest.NewRecorder()
	v.ServeHTTP(w, r)
	return w.Code, w.Result().Header, w.Body.Bytes()
}

func q(kv ...string) string {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Set(kv[i], kv[i+1])
	}
	return v.Encode()
}

func TestOverview(t *testing.T) {
	_, v := testRun(t)
	code, _, body := get(t, v, "/api/run")
	if code != http.StatusOK {
		t.Fatalf("GET /api/run = %d %s", code, body)
	}
	o := decode[Overview](t, body)
	var paths []string
	for _, d := range o.Datasets {
		paths = append(paths, d.Path)
		if d.Error != "" {
			t.Errorf("dataset %s: error %q, want none", d.Path, d.Error)
		}
		if d.Digest == "" || d.Kind == "" || d.Stage == "" {
			t.Errorf("dataset %s = %+v, want kind, stage and digest", d.Path, d)
		}
	}
	want := []string{"mempo/iter-1/advantages", "mempo/iter-1/logprobs", "mempo/iter-1/rollouts", "mempo/iter-1/scores",
		"mempo/iter-2/advantages", "mempo/iter-2/logprobs", "mempo/iter-2/rollouts", "mempo/iter-2/scores", "task/prompts"}
	if !slices.Equal(paths, want) {
		t.Errorf("datasets = %v, want %v", paths, want)
	}
	if len(o.Checkpoints) != 1 || o.Checkpoints[0].Path != "sft" || o.Checkpoints[0].Digest == "" {
		t.Errorf("checkpoints = %+v, want sft with a digest", o.Checkpoints)
	}
	if len(o.Groups) != 2 || o.Groups[0].Path != "mempo/iter-1" || o.Groups[1].Iter != 2 || o.Groups[0].Series != "mempo" {
		t.Fatalf("groups = %+v, want mempo/iter-1 and iter-2", o.Groups)
	}
	for _, d := range o.Datasets {
		if d.Path == "mempo/iter-1/rollouts" && (d.Timings.TotalS != 12.5 || d.Timings.Phases["generate"] != 11 || d.Timings.Phases["retrieve"] != 1.5) {
			t.Errorf("dataset %s timings %+v, want the manifest's 12.5 s, generate 11 and retrieve 1.5", d.Path, d.Timings)
		}
	}
	if got := o.Groups[0].Figures["rollouts.answered_frac"]; got != 0.75 {
		t.Errorf("figure rollouts.answered_frac = %v, want 0.75", got)
	}
	if got := o.Groups[0].Datasets[format.KindLogprobs]; got != "mempo/iter-1/logprobs" {
		t.Errorf("group logprobs = %q, want mempo/iter-1/logprobs", got)
	}
	if len(o.Eval) != 1 || len(o.Eval[0].Tables) != 1 || !slices.Equal(o.Eval[0].Tables[0].Rows[0], []string{"mempo", "0.5"}) {
		t.Errorf("eval = %+v, want one table with row mempo 0.5", o.Eval)
	}
}

func TestRewards(t *testing.T) {
	_, v := testRun(t)
	code, _, body := get(t, v, "/api/rewards?"+q("series", "mempo"))
	got := decode[[]Reward](t, body)
	if code != http.StatusOK || len(got) != 2 {
		t.Fatalf("GET rewards = %d %s, want two groups", code, body)
	}
	for _, r := range got {
		if r.Trajectories != 12 || r.MeanReward != 0.5 || r.FormatOKFrac != 0.75 || r.Error != "" {
			t.Errorf("rewards of %s = %+v, want 12 trajectories, mean 0.5, format ok 0.75", r.Group, r)
		}
	}
}

func TestQuestion(t *testing.T) {
	_, v := testRun(t)
	code, _, body := get(t, v, "/api/question?"+q("group", "mempo/iter-1", "uid", "q00000"))
	if code != http.StatusOK {
		t.Fatalf("GET question = %d %s", code, body)
	}
	got := decode[Question](t, body)
	if len(got.Trajectories) != 4 || len(got.Missing) != 0 {
		t.Fatalf("question: %d trajectories, missing %v; want 4 and none", len(got.Trajectories), got.Missing)
	}
	if got.Question != "Who founded Acme 0?; Where is Acme 0 based?" || len(got.Golds) != 2 {
		t.Errorf("question %q golds %v, want the prompt's", got.Question, got.Golds)
	}
	tr := got.Trajectories[1]
	if tr.Score == nil || tr.Score.Reward != 1 || !tr.Score.FormatOK || got.Trajectories[2].Score.FormatOK {
		t.Errorf("scores = %+v, %+v; want reward 1 for sample 1 and invalid format for sample 2", tr.Score, got.Trajectories[2].Score)
	}
	// Model text comes back as data, byte for byte.
	if tr.Turns[0].Memory != evil || !strings.HasSuffix(tr.Turns[0].Response, evil) {
		t.Errorf("sample 1 turn 0 memory %q response %q, want them to hold %q", tr.Turns[0].Memory, tr.Turns[0].Response, evil)
	}
	t1 := got.Trajectories[0].Turns[1]
	if t1.PMem == nil || *t1.PMem != float32(0.51) || t1.PFull == nil || *t1.PFull != 0.25 || t1.PCtx == nil || *t1.PCtx != 0.125 {
		t.Errorf("turn 1 P_mem %v P_full %v P_ctx %v, want 0.51, 0.25 and 0.125", t1.PMem, t1.PFull, t1.PCtx)
	}
	if t1.MemReward == nil || *t1.MemReward != float32(0.51)-0.25 || t1.AdvMemory == nil || *t1.AdvMemory != 1 {
		t.Errorf("turn 1 mem reward %v adv memory %v, want 0.26 and 1", t1.MemReward, t1.AdvMemory)
	}
	if !slices.Equal(t1.GoldsInMem, []int{0}) || !slices.Equal(got.Trajectories[0].Turns[2].GoldsInMem, []int{0, 1}) {
		t.Errorf("golds in memory = %v, %v; want [0] and [0 1]", t1.GoldsInMem, got.Trajectories[0].Turns[2].GoldsInMem)
	}
	if t0 := got.Trajectories[0].Turns[0]; t0.PMem != nil || t0.MemReward != nil || t0.AdvOutcome == nil || *t0.AdvOutcome != -0.5 {
		t.Errorf("turn 0 without memory: P_mem %v mem reward %v adv outcome %v, want nil, nil, -0.5", t0.PMem, t0.MemReward, t0.AdvOutcome)
	}
	if a := got.Trajectories[0].Turns[2]; a.Action != "answer" || a.Query != "Alice; Paris" {
		t.Errorf("last turn %s %q, want answer %q", a.Action, a.Query, "Alice; Paris")
	}
}

func TestQuestions(t *testing.T) {
	_, v := testRun(t)
	for _, c := range []struct {
		name, query string
		want        []string
	}{
		{"all", q("group", "mempo/iter-1"), []string{"q00000", "q00001", "q00002"}},
		{"uid", q("group", "mempo/iter-1", "q", "Q00002"), []string{"q00002"}},
		{"question text", q("group", "mempo/iter-1", "q", "acme 1?"), []string{"q00001"}},
		{"reward above", q("group", "mempo/iter-1", "min", "0.6"), nil},
		{"reward range", q("group", "mempo/iter-1", "min", "0.5", "max", "0.5"), []string{"q00000", "q00001", "q00002"}},
		{"invalid", q("group", "mempo/iter-2", "invalid", "1", "q", "q00001"), []string{"q00001"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, _, body := get(t, v, "/api/questions?"+c.query)
			if code != http.StatusOK {
				t.Fatalf("GET questions = %d %s", code, body)
			}
			var uids []string
			for _, s := range decode[[]QuestionSummary](t, body) {
				uids = append(uids, s.UID)
				if s.Samples != 4 || s.MeanReward != 0.5 || s.Invalid != 1 {
					t.Errorf("%s = %+v, want 4 samples, mean reward 0.5, 1 invalid", s.UID, s)
				}
			}
			if !slices.Equal(uids, c.want) {
				t.Errorf("uids = %v, want %v", uids, c.want)
			}
		})
	}
	if code, _, body := get(t, v, "/api/questions?"+q("group", "mempo/iter-1", "min", "x")); code != http.StatusBadRequest {
		t.Errorf("min=x: %d %s, want 400", code, body)
	}
}

func TestTokens(t *testing.T) {
	_, v := testRun(t)
	code, _, body := get(t, v, "/api/tokens?"+q("group", "mempo/iter-1", "uid", "q00000", "sample", "1", "turn", "1"))
	if code != http.StatusOK {
		t.Fatalf("GET tokens = %d %s", code, body)
	}
	got := decode[Tokens](t, body)
	if got.Tokenizer != "sft/tokenizer.json" || got.Note != "" {
		t.Errorf("tokenizer %q note %q, want sft/tokenizer.json and no note", got.Tokenizer, got.Note)
	}
	var text strings.Builder
	for i, tok := range got.Tokens {
		text.WriteString(tok.Text)
		if tok.Advantage == nil || *tok.Advantage != 0.5+0.01*float32(i) {
			t.Errorf("token %d advantage %v, want %v", i, tok.Advantage, 0.5+0.01*float32(i))
		}
		if tok.Old == nil || tok.Ref == nil || *tok.Old-*tok.Ref < 0.009 || *tok.Old-*tok.Ref > 0.011 {
			t.Errorf("token %d old %v ref %v, want old - ref = 0.01", i, tok.Old, tok.Ref)
		}
	}
	if text.String() != got.Response {
		t.Errorf("tokens decode to %q, want the response %q", text.String(), got.Response)
	}
	mem := ""
	for _, tok := range got.Tokens[got.MemStart:got.MemEnd] {
		mem += tok.Text
	}
	if got.MemStart != 0 || mem != "<mem>the founder is alice</mem>" {
		t.Errorf("memory span [%d,%d) = %q, want <mem>the founder is alice</mem>", got.MemStart, got.MemEnd, mem)
	}
	for _, bad := range []string{q("group", "mempo/iter-1", "uid", "q00000", "sample", "x", "turn", "0"),
		q("group", "mempo/iter-1", "uid", "q00000", "sample", "9", "turn", "0")} {
		if code, _, body := get(t, v, "/api/tokens?"+bad); code != http.StatusBadRequest && code != http.StatusNotFound {
			t.Errorf("tokens %s = %d %s, want 400 or 404", bad, code, body)
		}
	}
}

func TestTokensWithoutTokenizer(t *testing.T) {
	dir := t.TempDir()
	makeRun(t, dir, spec{questions: 1, samples: 2, turns: 2, shards: 1, iters: 1})
	v, err := New(Config{Run: dir}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	code, _, body := get(t, v, "/api/tokens?"+q("group", "mempo/iter-1", "uid", "q00000", "sample", "0", "turn", "1"))
	got := decode[Tokens](t, body)
	if code != http.StatusOK || got.Tokenizer != "" || !strings.Contains(got.Note, "ids only") || len(got.Tokens) != 9 || got.Tokens[0].ID != 100 {
		t.Errorf("tokens = %d %+v, want ids 100… with a note saying ids only", code, got)
	}
}

func TestCompare(t *testing.T) {
	_, v := testRun(t)
	code, _, body := get(t, v, "/api/compare?"+q("series", "mempo", "uid", "q00001"))
	if code != http.StatusOK {
		t.Fatalf("GET compare = %d %s", code, body)
	}
	got := decode[Compare](t, body)
	if len(got.Cells) != 2 || got.Cells[0].Iter != 1 || got.Cells[1].Iter != 2 || got.Golds == nil {
		t.Fatalf("compare = %+v, want iterations 1 and 2 with golds", got)
	}
	for _, c := range got.Cells {
		if c.Error != "" || len(c.Trajectories) != 4 || c.MeanReward == nil || *c.MeanReward != 0.5 {
			t.Errorf("cell %s = error %q, %d trajectories, mean %v; want 4 and 0.5", c.Group, c.Error, len(c.Trajectories), c.MeanReward)
		}
	}
	code, _, body = get(t, v, "/api/compare?"+q("series", "mempo", "uid", "nope"))
	got = decode[Compare](t, body)
	if code != http.StatusOK || len(got.Cells) != 2 || !strings.Contains(got.Cells[0].Error, "no rollouts of uid") {
		t.Errorf("compare of a missing uid = %d %+v, want cells saying so", code, got)
	}
}

// TestCompareVariants: "*" and a list of series put the variants of one iteration side
// by side, iteration by iteration, leaving out the groups without the question.
func TestCompareVariants(t *testing.T) {
	dir, _ := testRun(t, true)
	if err := os.CopyFS(filepath.Join(dir, "grpo", "iter-1"), os.DirFS(filepath.Join(dir, "mempo", "iter-1"))); err != nil {
		t.Fatal(err)
	}
	v, err := New(Config{Run: dir}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	for _, series := range []string{"*", "grpo,mempo"} {
		code, _, body := get(t, v, "/api/compare?"+q("series", series, "uid", "q00001"))
		if code != http.StatusOK {
			t.Fatalf("GET compare %s = %d %s", series, code, body)
		}
		var groups []string
		for _, c := range decode[Compare](t, body).Cells {
			groups = append(groups, c.Group)
			if c.Error != "" || len(c.Trajectories) != 4 {
				t.Errorf("%s: cell %s = error %q, %d trajectories; want 4", series, c.Group, c.Error, len(c.Trajectories))
			}
		}
		if want := []string{"grpo/iter-1", "mempo/iter-1", "mempo/iter-2"}; !slices.Equal(groups, want) {
			t.Errorf("compare %s: cells %v, want %v", series, groups, want)
		}
	}
	if code, _, body := get(t, v, "/api/compare?"+q("series", "*", "uid", "nope")); code != http.StatusNotFound {
		t.Errorf("compare of a uid no variant holds = %d %s, want 404", code, body)
	}
}

// TestModelTextEscaped: model output reaches the browser only as JSON data; no answer
// holds it as markup, and every answer carries the strict policy.
func TestModelTextEscaped(t *testing.T) {
	_, v := testRun(t)
	paths := []string{"/", "/static/app.js", "/static/app.css", "/api/run",
		"/api/questions?" + q("group", "mempo/iter-1"),
		"/api/question?" + q("group", "mempo/iter-1", "uid", "q00000"),
		"/api/tokens?" + q("group", "mempo/iter-1", "uid", "q00000", "sample", "1", "turn", "0"),
		"/api/compare?" + q("series", "mempo", "uid", "q00000"),
		"/api/rewards?" + q("series", "mempo"),
		"/api/question?" + q("group", "mempo/iter-1", "uid", evil),
		"/api/nothing?" + q("x", evil)}
	for _, p := range paths {
		code, h, body := get(t, v, p)
		if strings.Contains(string(body), "<script>alert") || strings.Contains(string(body), "alert(1)</script>") {
			t.Errorf("GET %s (%d) holds the model text unescaped", p, code)
		}
		if h.Get("Content-Security-Policy") != CSP || h.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: headers %v, want the CSP and nosniff", p, h)
		}
		if strings.HasPrefix(p, "/api/") && !strings.HasPrefix(h.Get("Content-Type"), "application/json") {
			t.Errorf("GET %s: content type %q, want application/json", p, h.Get("Content-Type"))
		}
	}
	for _, f := range []string{"static/app.js", "static/index.html"} {
		b, err := fs.ReadFile(static, f)
		if err != nil {
			t.Fatal(err)
		}
		for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("} {
			if strings.Contains(string(b), bad) {
				t.Errorf("%s uses %s; pages insert run text as text only", f, bad)
			}
		}
	}
}

func TestIncompleteDataset(t *testing.T) {
	dir, v := testRun(t, true)
	// A shard listed in the manifest is gone: the group's question page says which.
	if err := os.Remove(filepath.Join(dir, "mempo", "iter-2", "rollouts", "part-00001.parquet")); err != nil {
		t.Fatal(err)
	}
	code, _, body := get(t, v, "/api/question?"+q("group", "mempo/iter-2", "uid", "q00000"))
	e := decode[apiError](t, body)
	if code != http.StatusConflict || !strings.Contains(e.Error, "part-00001.parquet") || !strings.Contains(e.Error, "missing") {
		t.Errorf("question over a missing shard = %d %q, want 409 naming part-00001.parquet", code, e.Error)
	}
	// A dataset without its manifest (a stage still writing it, or killed).
	if err := os.Remove(filepath.Join(dir, "mempo", "iter-1", "logprobs", format.ManifestName)); err != nil {
		t.Fatal(err)
	}
	code, _, body = get(t, v, "/api/dataset?"+q("path", "mempo/iter-1/logprobs"))
	e = decode[apiError](t, body)
	if code != http.StatusConflict || !strings.Contains(e.Error, "not committed") {
		t.Errorf("dataset without manifest = %d %q, want 409 saying it is not committed", code, e.Error)
	}
	// The question page still shows what is there and lists what is not.
	// The overview is rescanned at most every two seconds; a new viewer sees the change now.
	v2, err := New(Config{Run: dir}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	code, _, body = get(t, v2, "/api/question?"+q("group", "mempo/iter-1", "uid", "q00000"))
	got := decode[Question](t, body)
	if code != http.StatusOK || len(got.Missing) != 1 || !strings.HasPrefix(got.Missing[0], "logprobs: no dataset") {
		t.Errorf("question without logprobs = %d, missing %v; want 200 and logprobs missing", code, got.Missing)
	}
	// A shard cut short: the scores of the group are reported, not decoded.
	scores := filepath.Join(dir, "mempo", "iter-1", "scores", "part-00000.parquet")
	if err := os.Truncate(scores, 100); err != nil {
		t.Fatal(err)
	}
	code, _, body = get(t, v2, "/api/question?"+q("group", "mempo/iter-1", "uid", "q00000"))
	got = decode[Question](t, body)
	if code != http.StatusOK || len(got.Missing) != 2 || !strings.Contains(got.Missing[0], "part-00000.parquet has 100 bytes") {
		t.Errorf("question with a truncated scores shard = %d, missing %v; want 200 and the shard named", code, got.Missing)
	}
	code, _, body = get(t, v2, "/api/questions?"+q("group", "mempo/iter-1"))
	if e := decode[apiError](t, body); code != http.StatusConflict || !strings.Contains(e.Error, "scores") {
		t.Errorf("questions over a truncated scores shard = %d %q, want 409 naming it", code, e.Error)
	}
	code, _, body = get(t, v2, "/api/run")
	o := decode[Overview](t, body)
	errs := map[string]string{}
	for _, d := range o.Datasets {
		errs[d.Path] = d.Error
	}
	if code != http.StatusOK || !strings.Contains(errs["mempo/iter-2/rollouts"], "missing") || !strings.Contains(errs["mempo/iter-1/logprobs"], "not committed") {
		t.Errorf("overview errors = %v, want the two broken datasets named", errs)
	}
	for _, p := range []string{"/api/dataset?" + q("path", "../../etc"), "/api/dataset?" + q("path", "/etc"), "/api/question?" + q("group", "nope", "uid", "x")} {
		if code, _, body := get(t, v2, p); code != http.StatusNotFound {
			t.Errorf("GET %s = %d %s, want 404", p, code, body)
		}
	}
}

func TestCheckAddr(t *testing.T) {
	for _, c := range []struct {
		addr   string
		remote bool
		ok     bool
	}{
		{DefaultAddr, false, true},
		{"localhost:0", false, true},
		{"[::1]:8080", false, true},
		{"0.0.0.0:8080", false, false},
		{":8080", false, false},
		{"192.168.1.5:8080", false, false},
		{"0.0.0.0:8080", true, true},
		{"nonsense", false, false},
	} {
		err := CheckAddr(c.addr, c.remote)
		if (err == nil) != c.ok {
			t.Errorf("CheckAddr(%q, %v) = %v, want ok %v", c.addr, c.remote, err, c.ok)
		}
		if err != nil && c.addr != "nonsense" && !errors.Is(err, ErrRemote) {
			t.Errorf("CheckAddr(%q) = %v, want ErrRemote", c.addr, err)
		}
	}
	if DefaultAddr != "127.0.0.1:8080" {
		t.Errorf("DefaultAddr = %q, want loopback 127.0.0.1:8080", DefaultAddr)
	}
}

func TestRemoteHostRefused(t *testing.T) {
	_, v := testRun(t)
	r := httptest.NewRequest(http.MethodGet, "http://attacker.example:8080/api/run", nil)
	w := httptest.NewRecorder()
	v.ServeHTTP(w, r)
	if w.Code != http.StatusForbidden {
		t.Errorf("GET with Host attacker.example = %d, want 403", w.Code)
	}
}

// TestNeverWrites: serving every page leaves the run byte for byte and time for time
// as it was.
func TestNeverWrites(t *testing.T) {
	dir, v := testRun(t)
	before := snapshot(t, dir)
	for _, p := range []string{"/api/run", "/api/questions?" + q("group", "mempo/iter-1"),
		"/api/question?" + q("group", "mempo/iter-2", "uid", "q00001"),
		"/api/tokens?" + q("group", "mempo/iter-1", "uid", "q00001", "sample", "0", "turn", "0"),
		"/api/compare?" + q("series", "mempo", "uid", "q00002"), "/api/dataset?" + q("path", "task/prompts")} {
		if code, _, body := get(t, v, p); code != http.StatusOK {
			t.Errorf("GET %s = %d %s", p, code, body)
		}
	}
	if after := snapshot(t, dir); !slices.Equal(before, after) {
		t.Errorf("the run changed while viewed:\nbefore %v\nafter  %v", before, after)
	}
}

func snapshot(t *testing.T, dir string) []string {
	var out []string
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		st, err := e.Info()
		if err != nil {
			return err
		}
		out = append(out, p+" "+st.Mode().String()+" "+st.ModTime().String()+" "+string(rune('0'+st.Size()%10)))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestLinkedRun: a run reached through a symbolic link lists what its target holds.
func TestLinkedRun(t *testing.T) {
	dir, _ := testRun(t)
	link := filepath.Join(t.TempDir(), "run")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	v, err := New(Config{Run: link}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	code, _, body := get(t, v, "/api/run")
	if code != http.StatusOK {
		t.Fatalf("GET /api/run = %d %s", code, body)
	}
	if o := decode[Overview](t, body); len(o.Datasets) != 9 || len(o.Groups) != 2 {
		t.Errorf("linked run: %d datasets in %d groups, want 9 in 2", len(o.Datasets), len(o.Groups))
	}
}
