package ingest

import (
	"compress/gzip"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/google/go-cmp/cmp"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/jobs"
)

// The fixtures come from testdata/make_fixtures.py (pyarrow); see its docstring.

// searchR1User is the user message make_fixtures.py wraps a Search-R1 question in.
func searchR1User(q string) string {
	return "Answer the given question. You must conduct reasoning inside <think> and </think> " +
		"first every time you get new information. ... Question: " + q + "\n"
}

func TestReadParquetSearchR1(t *testing.T) {
	got, err := ReadParquet(filepath.Join("testdata", "search_r1.parquet"), Config{K: 1})
	if err != nil {
		t.Fatalf("ReadParquet error: %v", err)
	}
	want := []Question{
		{"nq", "train", 0, "who wrote the play hamlet", []string{"William Shakespeare", "Shakespeare"}, "", searchR1User("who wrote the play hamlet"), nil},
		{"nq", "train", 1, "what is the capital city of australia", []string{"Canberra"}, "", searchR1User("what is the capital city of australia"), nil},
		{"hotpotqa", "train", 2, "which river flows through the city where the eiffel tower stands", []string{"Seine", "the Seine", "River Seine"}, "", searchR1User("which river flows through the city where the eiffel tower stands"), nil},
		{"nq", "train", 3, "how many strings does a standard violin have", []string{"four", "4"}, "", searchR1User("how many strings does a standard violin have"), nil},
		{"hotpotqa", "train", 4, "who directed the film that won best picture in 1998", []string{"James Cameron"}, "", searchR1User("who directed the film that won best picture in 1998"), nil},
		{"nq", "train", 5, "what element has the chemical symbol fe", []string{"iron"}, "", searchR1User("what element has the chemical symbol fe"), nil},
		{"nq", "train", 6, "in which year did the berlin wall fall", []string{"1989"}, "", searchR1User("in which year did the berlin wall fall"), nil},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ReadParquet(search_r1.parquet) (-want +got):\n%s", diff)
	}
}

func TestReadParquetVerlPlain(t *testing.T) {
	// large_string columns, no question column, ground_truth a plain string, no split.
	got, err := ReadParquet(filepath.Join("testdata", "verl_plain.parquet"), Config{})
	if err != nil {
		t.Fatalf("ReadParquet error: %v", err)
	}
	want := []Question{
		{"toy", "verl_plain", 0, "what is 2 plus 3", []string{"5"}, "You are a helpful assistant.", "Answer briefly.\nQuestion: what is 2 plus 3\n", nil},
		{"toy", "verl_plain", 1, "name the largest planet", []string{"Jupiter"}, "You are a helpful assistant.", "Answer briefly.\nQuestion: name the largest planet\n", nil},
		{"toy", "verl_plain", 2, "what colour is the sky", []string{"blue"}, "You are a helpful assistant.", "Answer briefly.\nQuestion: what colour is the sky\n", nil},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ReadParquet(verl_plain.parquet) (-want +got):\n%s", diff)
	}
	got, err = ReadParquet(filepath.Join("testdata", "verl_plain.parquet"), Config{Split: "test", OverrideDataSource: "gsm", DropPrompt: true})
	if err != nil || got[0].Split != "test" || got[0].DataSource != "gsm" || got[0].System != "" || got[0].User != "" {
		t.Errorf("with overrides: %+v, %v, want split test, data_source gsm and no prompt messages", got[0], err)
	}
}

// TestDataSource: a question keeps its file's own data_source; DataSource names only
// those without one (else the file name does), and OverrideDataSource replaces every
// one. Search-R1's file mixes nq and hotpotqa rows, which a DataSource of nq once
// relabeled all as nq.
func TestDataSource(t *testing.T) {
	searchR1 := filepath.Join("testdata", "search_r1.parquet")
	mixed := writeTemp(t, "dev.jsonl", `{"question": "q0", "answer": "a", "data_source": "nq"}
{"question": "q1", "answer": "b"}
{"question": "q2", "answer": "c", "data_source": ""}
{"question": "q3", "answer": "d", "data_source": "hotpotqa"}
`)
	tests := []struct {
		name string
		path string
		cfg  Config
		want []string
	}{
		{"parquet own", searchR1, Config{}, []string{"nq", "nq", "hotpotqa", "nq", "hotpotqa", "nq", "nq"}},
		{"parquet own over flag", searchR1, Config{DataSource: "nq"}, []string{"nq", "nq", "hotpotqa", "nq", "hotpotqa", "nq", "nq"}},
		{"parquet override", searchR1, Config{OverrideDataSource: "mix"}, []string{"mix", "mix", "mix", "mix", "mix", "mix", "mix"}},
		{"jsonl file name fills", mixed, Config{}, []string{"nq", "dev", "dev", "hotpotqa"}},
		{"jsonl flag fills", mixed, Config{DataSource: "wiki"}, []string{"nq", "wiki", "wiki", "hotpotqa"}},
		{"jsonl override wins", mixed, Config{DataSource: "wiki", OverrideDataSource: "mix"}, []string{"mix", "mix", "mix", "mix"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			qs, err := Read(tt.path, tt.cfg)
			if err != nil {
				t.Fatalf("Read(%s, %+v) error: %v", tt.path, tt.cfg, err)
			}
			got := make([]string, len(qs))
			for i, q := range qs {
				got[i] = q.DataSource
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Read(%s, %+v) data_source (-want +got):\n%s", tt.path, tt.cfg, diff)
			}
		})
	}
}

func TestImportComposesK(t *testing.T) {
	prompts, rep, err := Import([]string{filepath.Join("testdata", "search_r1.parquet")}, Config{K: 2})
	if err != nil {
		t.Fatal(err)
	}
	// nq has rows 0,1,3,5,6 → (0,1), (3,5), 6 dropped; hotpotqa rows 2,4 → (2,4).
	want := []format.Prompt{
		{DataSource: "nq", Split: "train", SourceIndex: []int64{0, 1},
			Question: "who wrote the play hamlet; what is the capital city of australia",
			Golds:    [][]string{{"William Shakespeare", "Shakespeare"}, {"Canberra"}}},
		{DataSource: "nq", Split: "train", SourceIndex: []int64{3, 5},
			Question: "how many strings does a standard violin have; what element has the chemical symbol fe",
			Golds:    [][]string{{"four", "4"}, {"iron"}}},
		{DataSource: "hotpotqa", Split: "train", SourceIndex: []int64{2, 4},
			Question: "which river flows through the city where the eiffel tower stands; who directed the film that won best picture in 1998",
			Golds:    [][]string{{"Seine", "the Seine", "River Seine"}, {"James Cameron"}}},
	}
	for i := range want {
		want[i].UID = UID(want[i].DataSource, want[i].Split, want[i].SourceIndex, want[i].Question)
	}
	if diff := cmp.Diff(want, prompts); diff != "" {
		t.Errorf("Import K=2 (-want +got):\n%s", diff)
	}
	if rep != (Report{Questions: 7, Prompts: 3, Dropped: 1}) {
		t.Errorf("Report = %+v, want 7 questions, 3 prompts, 1 dropped", rep)
	}

	// The rows are valid prompts shard rows.
	path := filepath.Join(t.TempDir(), format.ShardName(0))
	w, err := format.Create[format.Prompt](path)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(prompts...); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := format.OpenFile[format.Prompt](path)
	if err != nil {
		t.Fatal(err)
	}
	back, err := format.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(prompts, back); diff != "" {
		t.Errorf("prompts shard round trip (-want +got):\n%s", diff)
	}
}

func TestUID(t *testing.T) {
	base := UID("nq", "train", []int64{1, 2}, "a; b")
	tests := []struct {
		name string
		got  string
	}{
		{"source", UID("hotpotqa", "train", []int64{1, 2}, "a; b")},
		{"split", UID("nq", "test", []int64{1, 2}, "a; b")},
		{"index", UID("nq", "train", []int64{2, 1}, "a; b")},
		{"question", UID("nq", "train", []int64{1, 2}, "a; c")},
	}
	for _, tt := range tests {
		if tt.got == base {
			t.Errorf("changing the %s kept uid %s", tt.name, base)
		}
	}
	if again := UID("nq", "train", []int64{1, 2}, "a; b"); again != base || len(base) != 16 {
		t.Errorf("UID = %q then %q, want the same 16 hex digits", base, again)
	}
}

func writeTemp(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestReadJSONL(t *testing.T) {
	path := writeTemp(t, "dev.jsonl", `{"question": "q0", "golden_answers": ["a", " b "]}

{"question": "q1", "answer": "c", "data_source": "nq", "split": "test"}
{"question": "q2", "answers": [1989, "1989.0"]}
`)
	got, err := ReadJSONL(path, Config{})
	if err != nil {
		t.Fatalf("ReadJSONL error: %v", err)
	}
	want := []Question{
		{"dev", "dev", 0, "q0", []string{"a", "b"}, "", "", nil},
		{"nq", "test", 1, "q1", []string{"c"}, "", "", nil},
		{"dev", "dev", 2, "q2", []string{"1989", "1989.0"}, "", "", nil},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ReadJSONL (-want +got):\n%s", diff)
	}

	gz := filepath.Join(t.TempDir(), "dev.jsonl.gz")
	f, _ := os.Create(gz)
	zw := gzip.NewWriter(f)
	zw.Write([]byte(`{"question": "q0", "answer": "a"}` + "\n"))
	zw.Close()
	f.Close()
	got, err = Read(gz, Config{})
	if err != nil || len(got) != 1 || got[0].Golds[0] != "a" {
		t.Errorf("Read(%s) = %v, %v, want one question", gz, got, err)
	}
}

func TestBadInput(t *testing.T) {
	notParquet := writeTemp(t, "x.parquet", "PAR1 this is not parquet")
	tests := []struct {
		name string
		path string
		want string
	}{
		{"bad json", writeTemp(t, "a.jsonl", `{"question": "q", "answer": "a"}`+"\n{oops\n"), "line 2"},
		{"no question", writeTemp(t, "b.jsonl", `{"answer": "a"}`), `line 1: no "question" field`},
		{"no answer", writeTemp(t, "c.jsonl", `{"question": "q"}`), "line 1: no gold answer"},
		{"empty answers", writeTemp(t, "d.jsonl", `{"question": "q", "golden_answers": ["", " "]}`), "line 1: no gold answer"},
		{"object answer", writeTemp(t, "e.jsonl", `{"question": "q", "answer": {"x": 1}}`), "line 1: answers"},
		{"empty question", writeTemp(t, "f.jsonl", `{"question": " ", "answer": "a"}`), "line 1: empty question"},
		{"unknown type", writeTemp(t, "g.csv", "q,a\n"), "unknown file type"},
		{"not parquet", notParquet, "truncated or not Parquet"},
		{"missing file", filepath.Join(t.TempDir(), "none.jsonl"), "no such file"},
		{"wrong parquet", filepath.Join("..", "..", "format", "testdata", "metrics.parquet"), `no "question" or "prompt" column`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Read(tt.path, Config{})
			if err == nil || !strings.Contains(err.Error(), tt.path) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Read(%s) error = %v, want one naming the file and %q", tt.path, err, tt.want)
			}
		})
	}
}

func TestTruncatedParquet(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "search_r1.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 8, len(b) / 2, len(b) - 1} {
		path := writeTemp(t, "cut.parquet", string(b[:n]))
		if _, err := ReadParquet(path, Config{}); !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), path) {
			t.Errorf("ReadParquet(%d of %d bytes) error = %v, want ErrInput naming the file", n, len(b), err)
		}
	}
}

func TestImportDuplicateFile(t *testing.T) {
	p := filepath.Join("testdata", "verl_plain.parquet")
	_, _, err := Import([]string{p, p}, Config{K: 1})
	if !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), "same uid") {
		t.Errorf("Import(same file twice) error = %v, want a duplicate uid ErrInput", err)
	}
}

func TestComposeK(t *testing.T) {
	if _, _, err := Compose(nil, 0); !errors.Is(err, ErrInput) {
		t.Errorf("Compose(k=0) error = %v, want ErrInput", err)
	}
	qs := []Question{
		{"a", "train", 0, "q0", []string{"x"}, "", "", nil},
		{"a", "test", 1, "q1", []string{"y"}, "", "", nil},
		{"a", "train", 2, "q2", []string{"z"}, "", "", nil},
	}
	got, dropped, err := Compose(qs, 2)
	if err != nil || len(got) != 1 || dropped != 1 || got[0].Question != "q0; q2" {
		t.Errorf("Compose = %+v, %d, %v, want one train prompt \"q0; q2\" and the test question dropped", got, dropped, err)
	}
}

// TestImportKeepsPrompt: a question's own chat prompt reaches its prompts row at K = 1
// (the verl file's system message and user message), not a composed one, and not
// with DropPrompt.
func TestImportKeepsPrompt(t *testing.T) {
	path := filepath.Join("testdata", "verl_plain.parquet")
	one, _, err := Import([]string{path}, Config{K: 1})
	if err != nil {
		t.Fatal(err)
	}
	if one[0].System != "You are a helpful assistant." || one[0].User != "Answer briefly.\nQuestion: what is 2 plus 3\n" {
		t.Errorf("K=1 prompt messages %q, %q; want the file's", one[0].System, one[0].User)
	}
	for _, cfg := range []Config{{K: 2}, {K: 1, DropPrompt: true}} {
		got, _, err := Import([]string{path}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got[0].System != "" || got[0].User != "" {
			t.Errorf("%+v: prompt messages %q, %q; want none", cfg, got[0].System, got[0].User)
		}
	}
}

// HotpotQA's supporting facts, [title, sentence index] into context, import as the
// sentences they name, in both HotpotQA's own JSON and the Hugging Face form; composed
// prompts carry every objective's facts, or none when one objective has none; the
// prompts dataset writes the facts column only when some prompt has facts.
func TestImportHotpotQAFacts(t *testing.T) {
	path := writeTemp(t, "hotpot.jsonl", `{"question": "Which river flows through the city of the Eiffel Tower?", "answer": "Seine", "supporting_facts": [["Eiffel Tower", 1], ["Paris", 0]], "context": [["Eiffel Tower", ["The Eiffel Tower is a tower.", " It stands in Paris. "]], ["Paris", ["Paris lies on the Seine.", "It is a capital."]], ["Distractor", ["Nothing here."]]]}
{"question": "Who founded the firm in Lyon?", "answer": "Ada", "supporting_facts": {"title": ["Firm"], "sent_id": [0]}, "context": {"title": ["Firm", "Lyon"], "sentences": [["The firm was founded by Ada.", "It is in Lyon."], ["Lyon is a city."]]}}
{"question": "no facts here", "answer": "x"}
{"question": "and none here", "answer": "y"}
`)
	qs, err := ReadJSONL(path, Config{})
	if err != nil {
		t.Fatal(err)
	}
	want := [][][]string{
		{{"It stands in Paris."}, {"Paris lies on the Seine."}},
		{{"The firm was founded by Ada."}},
		nil, nil,
	}
	for i, q := range qs {
		if diff := cmp.Diff(want[i], q.Facts); diff != "" {
			t.Errorf("question %d facts (-want +got):\n%s", i, diff)
		}
	}

	ps, _, err := Compose(qs, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 2 {
		t.Fatalf("%d prompts, want 2", len(ps))
	}
	if diff := cmp.Diff(append(slices.Clone(want[0]), want[1]...), ps[0].Facts); diff != "" {
		t.Errorf("composed facts (-want +got):\n%s", diff)
	}
	if ps[1].Facts != nil {
		t.Errorf("prompt without facts has %v", ps[1].Facts)
	}
	// One objective without facts: the composed prompt has none.
	mixed, _, err := Compose([]Question{qs[0], qs[2]}, 2)
	if err != nil || len(mixed) != 1 || mixed[0].Facts != nil {
		t.Errorf("mixed composition = %+v, %v; want one prompt without facts", mixed, err)
	}

	for _, c := range []struct {
		file  string
		lines string
		facts bool
	}{{"hotpot.jsonl", "", true}, {"plain.jsonl", `{"question": "q", "answer": "a"}` + "\n", false}} {
		in := path
		if c.lines != "" {
			in = writeTemp(t, c.file, c.lines)
		}
		out := filepath.Join(t.TempDir(), "prompts")
		if _, err := Run(context.Background(), RunConfig{Config: Config{K: 1}, Inputs: []string{in}, ShardRows: 1}, jobs.Spec{Out: out}); err != nil {
			t.Fatal(err)
		}
		rows, err := format.ReadPrompts(out)
		if err != nil {
			t.Fatal(err)
		}
		d, err := format.OpenDataset(out)
		if err != nil {
			t.Fatal(err)
		}
		sc, err := d.Records(0, func(arrow.RecordBatch) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		has := sc.HasField("facts")
		if has != c.facts {
			t.Errorf("%s: facts column written %v, want %v", c.file, has, c.facts)
		}
		n := 0
		for _, r := range rows {
			if len(r.Facts) > 0 {
				n++
			}
		}
		if c.facts && n != 2 || !c.facts && n != 0 {
			t.Errorf("%s: %d prompts read back with facts", c.file, n)
		}
	}
}

func TestImportHotpotQAFactsErrors(t *testing.T) {
	for name, line := range map[string]string{
		"unknown paragraph": `{"question": "q", "answer": "a", "supporting_facts": [["Nope", 0]], "context": [["Yes", ["s"]]]}`,
		"sentence range":    `{"question": "q", "answer": "a", "supporting_facts": [["Yes", 3]], "context": [["Yes", ["s"]]]}`,
		"no context":        `{"question": "q", "answer": "a", "supporting_facts": [["Yes", 0]]}`,
		"bad pair":          `{"question": "q", "answer": "a", "supporting_facts": [["Yes"]], "context": [["Yes", ["s"]]]}`,
	} {
		path := writeTemp(t, "bad.jsonl", line+"\n")
		_, err := ReadJSONL(path, Config{})
		if !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), "line 1") || !strings.Contains(err.Error(), "supporting") && !strings.Contains(err.Error(), "context") {
			t.Errorf("%s: err = %v, want ErrInput naming line 1 and the field", name, err)
		}
	}
}
