package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// ReadParquet reads a verl-style question file: data_source, a chat prompt (list of
// {role, content}), reward_model.ground_truth — a string, a list of strings, or
// Search-R1's {target: [aliases]} — and extra_info.split. Search-R1's files also keep
// the original question and golden_answers columns, which are preferred when present:
// the prompt holds the question wrapped in a training template, and the question is
// then recovered as the text after the user message's last "Question:".
//
// Writers differ (pyarrow, HF datasets, pandas), so string and list columns may be
// large or small types; both are read.
func ReadParquet(path string, cfg Config) (qs []Question, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("import %s: %w", path, err)
	}
	defer f.Close()
	defer func() {
		// The footer and pages are untrusted input; arrow panics on some corruption.
		if p := recover(); p != nil {
			qs, err = nil, fmt.Errorf("import %s: truncated or not Parquet (%v): %w", path, p, ErrInput)
		}
	}()
	pf, err := file.NewParquetReader(f)
	if err != nil {
		return nil, fmt.Errorf("import %s: truncated or not Parquet (%w): %w", path, err, ErrInput)
	}
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 4096}, memory.DefaultAllocator)
	if err != nil {
		return nil, fmt.Errorf("import %s: %w: %w", path, err, ErrInput)
	}
	sc, err := fr.Schema()
	if err != nil {
		return nil, fmt.Errorf("import %s: %w: %w", path, err, ErrInput)
	}
	if err := checkColumns(sc, cfg); err != nil {
		return nil, fmt.Errorf("import %s: %w", path, err)
	}
	rr, err := fr.GetRecordReader(context.Background(), nil, nil)
	if err != nil {
		return nil, fmt.Errorf("import %s: %w: %w", path, err, ErrInput)
	}
	defer rr.Release()
	var row int64
	for rr.Next() {
		rec := rr.RecordBatch()
		for i := range int(rec.NumRows()) {
			q, err := verlRow(rec, i, row)
			if err == nil {
				err = finish(&q, cfg, path, rowName(row))
			} else {
				err = fmt.Errorf("import %s: %s: %w", path, rowName(row), err)
			}
			if err != nil {
				return nil, err
			}
			qs = append(qs, q)
			row++
		}
	}
	if err := rr.Err(); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("import %s: %s: %w: %w", path, rowName(row), err, ErrInput)
	}
	return qs, nil
}

// checkColumns fails early, naming the fix, when no column can supply the question
// or the answers.
func checkColumns(sc *arrow.Schema, cfg Config) error {
	has := func(name string) bool { return len(sc.FieldIndices(name)) > 0 }
	if !has("question") && !has("prompt") {
		return fmt.Errorf(`no "question" or "prompt" column: want a verl-style file (data_source, prompt, reward_model, extra_info): %w`, ErrInput)
	}
	if !has("reward_model") && !has("golden_answers") {
		return fmt.Errorf(`no "reward_model" or "golden_answers" column: the answers are needed for rewards: %w`, ErrInput)
	}
	return nil
}

func verlRow(rec arrow.RecordBatch, i int, row int64) (Question, error) {
	q := Question{Index: row}
	q.DataSource, _ = str(column(rec, "data_source"), i)
	q.Split, _ = str(field(column(rec, "extra_info"), "split"), i)

	if text, ok := str(column(rec, "question"), i); ok {
		q.Text = text
	} else {
		text, err := promptQuestion(column(rec, "prompt"), i)
		if err != nil {
			return q, err
		}
		q.Text = text
	}
	q.System, q.User = promptMessages(column(rec, "prompt"), i)

	golds, err := answers(field(field(column(rec, "reward_model"), "ground_truth"), ""), i)
	if err != nil {
		return q, fmt.Errorf(`column "reward_model.ground_truth": %w`, err)
	}
	if len(golds) == 0 {
		if golds, err = answers(column(rec, "golden_answers"), i); err != nil {
			return q, fmt.Errorf(`column "golden_answers": %w`, err)
		}
	}
	q.Golds = golds
	return q, nil
}

// promptQuestion recovers the question from a chat prompt: the last user message,
// cut after its last "Question:" when a template wraps it.
func promptQuestion(prompt arrow.Array, i int) (string, error) {
	msgs, lo, hi, ok := list(prompt, i)
	if !ok || hi == lo {
		return "", fmt.Errorf(`column "prompt": no messages and no "question" column: %w`, ErrInput)
	}
	roles, contents := field(msgs, "role"), field(msgs, "content")
	text := ""
	for j := lo; j < hi; j++ {
		role, _ := str(roles, j)
		if c, ok := str(contents, j); ok && (role == "user" || roles == nil) {
			text = c
		}
	}
	if text == "" {
		return "", fmt.Errorf(`column "prompt": no user message with content: %w`, ErrInput)
	}
	if k := strings.LastIndex(text, "Question:"); k >= 0 {
		text = text[k+len("Question:"):]
	}
	return text, nil
}

// promptMessages is a chat prompt's own first messages: its first system message and
// its last user message, each "" when it has none.
func promptMessages(prompt arrow.Array, i int) (system, user string) {
	msgs, lo, hi, ok := list(prompt, i)
	if !ok {
		return "", ""
	}
	roles, contents := field(msgs, "role"), field(msgs, "content")
	for j := lo; j < hi; j++ {
		role, _ := str(roles, j)
		c, _ := str(contents, j)
		switch {
		case role == "system" && system == "":
			system = c
		case role == "user":
			user = c
		}
	}
	return system, user
}

// answers reads gold aliases from a string, a list of strings, or a struct holding
// them in "target" (Search-R1).
func answers(a arrow.Array, i int) ([]string, error) {
	if a == nil || a.IsNull(i) {
		return nil, nil
	}
	if s, ok := str(a, i); ok {
		return []string{s}, nil
	}
	if vals, lo, hi, ok := list(a, i); ok {
		var out []string
		for j := lo; j < hi; j++ {
			s, ok := str(vals, j)
			if !ok && !vals.IsNull(j) {
				return nil, fmt.Errorf("list of %s, want strings: %w", vals.DataType(), ErrInput)
			}
			if ok {
				out = append(out, s)
			}
		}
		return out, nil
	}
	if t := field(a, "target"); t != nil {
		return answers(t, i)
	}
	return nil, fmt.Errorf("type %s: want a string, a list of strings or {target: [strings]}: %w", a.DataType(), ErrInput)
}

// column returns rec's column name, or nil.
func column(rec arrow.RecordBatch, name string) arrow.Array {
	idx := rec.Schema().FieldIndices(name)
	if len(idx) == 0 {
		return nil
	}
	return rec.Column(idx[0])
}

// field returns struct array a's child name, or nil. An empty name passes a through,
// so field(field(x, "ground_truth"), "") reads ground_truth whatever its type.
func field(a arrow.Array, name string) arrow.Array {
	if name == "" || a == nil {
		return a
	}
	s, ok := a.(*array.Struct)
	if !ok {
		return nil
	}
	idx, ok := s.DataType().(*arrow.StructType).FieldIdx(name)
	if !ok {
		return nil
	}
	return s.Field(idx)
}

// str reads a string (small, large or view, or UTF-8 binary) at i, copied out of the
// Arrow buffer.
func str(a arrow.Array, i int) (string, bool) {
	if a == nil || a.IsNull(i) {
		return "", false
	}
	switch a := a.(type) {
	case *array.String:
		return strings.Clone(a.Value(i)), true
	case *array.LargeString:
		return strings.Clone(a.Value(i)), true
	case *array.StringView:
		return strings.Clone(a.Value(i)), true
	case *array.Binary:
		return string(a.Value(i)), true
	case *array.LargeBinary:
		return string(a.Value(i)), true
	}
	return "", false
}

// list returns the values array of list a and the [lo, hi) range of row i.
func list(a arrow.Array, i int) (vals arrow.Array, lo, hi int, ok bool) {
	l, isList := a.(array.ListLike)
	if a == nil || !isList || a.IsNull(i) {
		return nil, 0, 0, false
	}
	s, e := l.ValueOffsets(i)
	return l.ListValues(), int(s), int(e), true
}
