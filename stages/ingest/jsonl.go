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
	// HotpotQA's supporting facts, [title, sentence index] pairs into context's
	// [title, sentences] paragraphs (or the Hugging Face form of both: parallel lists).
	SupportingFacts json.RawMessage `json:"supporting_facts"`
	Context         json.RawMessage `json:"context"`
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
		if len(jq.SupportingFacts) > 0 && string(jq.SupportingFacts) != "null" {
			facts, err := supportingFacts(jq.SupportingFacts, jq.Context)
			if err != nil {
				return nil, fmt.Errorf("import %s: %s: %w", path, where, err)
			}
			q.Facts = facts
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

// supportingFacts resolves HotpotQA's supporting facts to the sentences they name, one
// fact [sentence] each, in the order listed. Both HotpotQA's own JSON —
// "supporting_facts": [[title, sent_id], …], "context": [[title, [sentence, …]], …] —
// and the Hugging Face dataset's — {"title": […], "sent_id": […]} and {"title": […],
// "sentences": [[…], …]} — are read. A fact naming a paragraph or sentence the context
// lacks is an error: the question's facts would be incomplete.
func supportingFacts(rawFacts, rawContext json.RawMessage) ([][]string, error) {
	titles, ids, err := factRefs(rawFacts)
	if err != nil {
		return nil, err
	}
	paragraphs, err := contextParagraphs(rawContext)
	if err != nil {
		return nil, err
	}
	facts := make([][]string, 0, len(titles))
	for i, title := range titles {
		sents, ok := paragraphs[title]
		if !ok {
			return nil, fmt.Errorf("supporting fact %d names paragraph %q, which context lacks: %w", i, title, ErrInput)
		}
		if ids[i] < 0 || ids[i] >= len(sents) {
			return nil, fmt.Errorf("supporting fact %d names sentence %d of %q, which has %d: %w", i, ids[i], title, len(sents), ErrInput)
		}
		s := strings.TrimSpace(sents[ids[i]])
		if s == "" {
			return nil, fmt.Errorf("supporting fact %d: sentence %d of %q is empty: %w", i, ids[i], title, ErrInput)
		}
		facts = append(facts, []string{s})
	}
	return facts, nil
}

func factRefs(raw json.RawMessage) (titles []string, ids []int, err error) {
	var pairs [][]json.RawMessage
	if json.Unmarshal(raw, &pairs) == nil {
		for i, p := range pairs {
			var t string
			var n int
			if len(p) != 2 || json.Unmarshal(p[0], &t) != nil || json.Unmarshal(p[1], &n) != nil {
				return nil, nil, fmt.Errorf("supporting_facts[%d]: want [title, sentence index]: %w", i, ErrInput)
			}
			titles, ids = append(titles, t), append(ids, n)
		}
		return titles, ids, nil
	}
	var hf struct {
		Title  []string `json:"title"`
		SentID []int    `json:"sent_id"`
	}
	if err := json.Unmarshal(raw, &hf); err != nil || len(hf.Title) != len(hf.SentID) {
		return nil, nil, fmt.Errorf("supporting_facts: want [[title, sentence index], …] or {\"title\": […], \"sent_id\": […]} of one length: %w", ErrInput)
	}
	return hf.Title, hf.SentID, nil
}

func contextParagraphs(raw json.RawMessage) (map[string][]string, error) {
	out := map[string][]string{}
	if len(raw) == 0 || string(raw) == "null" {
		return nil, fmt.Errorf("supporting_facts without context: the sentences they name are in context: %w", ErrInput)
	}
	var pairs [][]json.RawMessage
	if json.Unmarshal(raw, &pairs) == nil {
		for i, p := range pairs {
			var t string
			var sents []string
			if len(p) != 2 || json.Unmarshal(p[0], &t) != nil || json.Unmarshal(p[1], &sents) != nil {
				return nil, fmt.Errorf("context[%d]: want [title, [sentence, …]]: %w", i, ErrInput)
			}
			out[t] = sents
		}
		return out, nil
	}
	var hf struct {
		Title     []string   `json:"title"`
		Sentences [][]string `json:"sentences"`
	}
	if err := json.Unmarshal(raw, &hf); err != nil || len(hf.Title) != len(hf.Sentences) {
		return nil, fmt.Errorf("context: want [[title, [sentence, …]], …] or {\"title\": […], \"sentences\": [[…], …]} of one length: %w", ErrInput)
	}
	for i, t := range hf.Title {
		out[t] = hf.Sentences[i]
	}
	return out, nil
}
