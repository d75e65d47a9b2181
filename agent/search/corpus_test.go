package search

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mempo/mempo/format"
)

// readAll drains a corpus file, returning the documents or the first error.
func readAll(t *testing.T, path string) ([]Doc, *Corpus, error) {
	t.Helper()
	c, err := OpenCorpus(path)
	if err != nil {
		return nil, nil, err
	}
	t.Cleanup(func() { c.Close() })
	var docs []Doc
	for {
		d, err := c.Next()
		if err == io.EOF {
			return docs, c, nil
		}
		if err != nil {
			return docs, c, err
		}
		docs = append(docs, d)
	}
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestCorpusParses(t *testing.T) {
	tests := []struct {
		name  string
		input string
		want  []Doc
	}{
		{
			name:  "wiki-18 layout",
			input: `{"id": "0", "contents": "\"Aaron\"\nAaron is a prophet.\nSecond line."}` + "\n",
			want:  []Doc{{ID: "0", Title: "Aaron", Text: "Aaron is a prophet.\nSecond line.", Contents: "\"Aaron\"\nAaron is a prophet.\nSecond line."}},
		},
		{
			name:  "numeric id, extra fields, no final newline",
			input: `{"id": 17, "contents": "T\nbody", "source": "x"}`,
			want:  []Doc{{ID: "17", Title: "T", Text: "body", Contents: "T\nbody"}},
		},
		{
			name:  "title only",
			input: `{"id": "a", "contents": "\"Only\""}`,
			want:  []Doc{{ID: "a", Title: "Only", Text: "", Contents: `"Only"`}},
		},
		{
			name:  "blank lines and byte order mark skipped",
			input: "\xef\xbb\xbf" + `{"id": "a", "contents": "A\nx"}` + "\n\n   \n" + `{"id": "b", "contents": "B\ny"}` + "\n",
			want: []Doc{
				{ID: "a", Title: "A", Text: "x", Contents: "A\nx"},
				{ID: "b", Title: "B", Text: "y", Contents: "B\ny"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _, err := readAll(t, writeFile(t, "corpus.jsonl", tt.input))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("documents (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCorpusErrorsNameTheLine(t *testing.T) {
	good := `{"id": "a", "contents": "A\nx"}` + "\n"
	tests := []struct {
		name  string
		input string
		want  string // substring of the error
	}{
		{"not JSON", good + good[:10] + "\n", "line 2: invalid JSON"},
		{"missing id", good + "\n" + `{"contents": "B\ny"}` + "\n", `line 3: missing "id"`},
		{"empty id", `{"id": "", "contents": "B\ny"}`, `line 1: empty "id"`},
		{"object id", `{"id": {}, "contents": "B\ny"}`, `line 1: "id" is {}, want a string or a number`},
		{"missing contents", `{"id": "b"}`, `line 1: id "b": missing "contents"`},
		{"contents not a string", `{"id": "b", "contents": 3}`, "line 1: invalid JSON"},
		{"duplicate id", good + `{"id": "b", "contents": "B"}` + "\n" + good, `line 3: id "a" already used at line 1`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFile(t, "corpus.jsonl", tt.input)
			_, _, err := readAll(t, path)
			if err == nil {
				t.Fatalf("read %q: no error, want one containing %q", tt.input, tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("error = %q, want it to name %s and contain %q", err, path, tt.want)
			}
			if !errors.Is(err, ErrCorpus) {
				t.Errorf("errors.Is(%v, ErrCorpus) = false, want true", err)
			}
		})
	}
}

func TestCorpusGzipAndDigest(t *testing.T) {
	plain := `{"id": "a", "contents": "A\nx"}` + "\n" + `{"id": "b", "contents": "B\ny"}` + "\n"
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write([]byte(plain))
	zw.Close()
	path := filepath.Join(t.TempDir(), "corpus.jsonl.gz")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	got, c, err := readAll(t, path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[1].ID != "b" {
		t.Fatalf("read gzip corpus = %+v, want documents a and b", got)
	}
	wantSHA, wantSize, err := format.Checksum(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.Digest() != wantSHA || c.Size() != wantSize {
		t.Errorf("Digest, Size = %s, %d; want %s, %d (the compressed file's bytes)", c.Digest(), c.Size(), wantSHA, wantSize)
	}
}

func TestCorpusMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "absent.jsonl")
	_, err := OpenCorpus(path)
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), path) {
		t.Errorf("OpenCorpus(%s) = %v, want a not-exist error naming the file", path, err)
	}
}

func TestSplitJoinContents(t *testing.T) {
	tests := []struct {
		contents, title, text string
	}{
		{"\"Paris\"\nParis is the capital.", "Paris", "Paris is the capital."},
		{"\"Paris\"\nline one\nline two", "Paris", "line one\nline two"},
		{"No quotes\ntext", "No quotes", "text"},
		{"\"\"Quoted\"\"\ntext", "Quoted", "text"},
		{"", "", ""},
	}
	for _, tt := range tests {
		title, text := SplitContents(tt.contents)
		if title != tt.title || text != tt.text {
			t.Errorf("SplitContents(%q) = %q, %q; want %q, %q", tt.contents, title, text, tt.title, tt.text)
		}
	}
	if got, want := JoinContents("Paris", "a\nb"), "\"Paris\"\na\nb"; got != want {
		t.Errorf("JoinContents = %q, want %q", got, want)
	}
}
