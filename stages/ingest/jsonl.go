package ingest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/klauspost/compress/gzip"
)

// maxLine bounds one JSONL line; a question with its answers is far smaller, so a
// longer line means the file is not a question file.
const maxLine = 16 << 20

// jsonQuestion is one JSONL line. The answer field names follow the files in use:
// FlashRAG/Search-R1 "golden_answers", and "answer"/"answers" elsewhere.
type jsonQuestion struct {
	Question      *string         `json:"question"`
	GoldenAnswers json.RawMessage `json:"golden_answers"`
	Answers       json.RawMessage `json:"answers"`
	Answer        json.RawMessage `json:"answer"`
	DataSource    string          `json:"data_source"`
	Split         string          `json:"split"`
}

// ReadJSONL reads a question file with one JSON object per line:
// {"question": "…", "golden_answers" | "answers" | "answer": "…" or ["…", …],
// optional "data_source" and "split"}. Blank lines are skipped; a ".gz" file is read
// compressed. Index counts questions from 0.
func ReadJSONL(path string, cfg Config) ([]Question, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("import %s: %w", path, err)
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(strings.ToLower(path), ".gz") {
		zr, err := gzip.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("import %s: %w: %w", path, err, ErrInput)
		}
		defer zr.Close()
		r = zr
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	var qs []Question
	for line := 1; sc.Scan(); line++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		where := "line " + strconv.Itoa(line)
		var jq jsonQuestion
		if err := json.Unmarshal(b, &jq); err != nil {
			return nil, fmt.Errorf("import %s: %s: %w: want one JSON object per line: %w", path, where, err, ErrInput)
		}
		if jq.Question == nil {
			return nil, fmt.Errorf(`import %s: %s: no "question" field: %w`, path, where, ErrInput)
		}
		q := Question{DataSource: jq.DataSource, Split: jq.Split, Index: int64(len(qs)), Text: *jq.Question}
		for _, raw := range []json.RawMessage{jq.GoldenAnswers, jq.Answers, jq.Answer} {
			if len(raw) == 0 || string(raw) == "null" {
				continue
			}
			golds, err := jsonAnswers(raw)
			if err != nil {
				return nil, fmt.Errorf("import %s: %s: %w", path, where, err)
			}
			q.Golds = golds
			break
		}
		if err := finish(&q, cfg, path, where); err != nil {
			return nil, err
		}
		qs = append(qs, q)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("import %s: after %d questions: %w: %w", path, len(qs), err, ErrInput)
	}
	return qs, nil
}

// jsonAnswers reads a string, a number or a list of them as gold aliases.
func jsonAnswers(raw json.RawMessage) ([]string, error) {
	var one any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // "1989" and 1989 are the same answer; float64 would print 1e+21
	if err := dec.Decode(&one); err != nil {
		return nil, fmt.Errorf("answers: %w: %w", err, ErrInput)
	}
	vals, ok := one.([]any)
	if !ok {
		vals = []any{one}
	}
	out := make([]string, 0, len(vals))
	for _, v := range vals {
		switch v := v.(type) {
		case string:
			out = append(out, v)
		case json.Number:
			out = append(out, v.String())
		default:
			return nil, fmt.Errorf("answers: %s: want a string or a list of strings: %w", raw, ErrInput)
		}
	}
	return out, nil
}
