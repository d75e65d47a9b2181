package audit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/mempo/mempo/format"
)

// maxDistinct bounds the strings remembered per column for the distinct count, so
// inspecting a large dataset stays in bounded memory; past it the count is a floor.
const maxDistinct = 100_000

// Summary is what `mempo inspect` reports about a dataset: its manifest, schema,
// per-column statistics over every row, and the first rows.
type Summary struct {
	Dir           string          `json:"dir"`
	Kind          format.Kind     `json:"kind"`
	SchemaVersion int             `json:"schema_version"`
	Stage         string          `json:"stage"`
	CacheKey      string          `json:"cache_key"`
	CodeVersion   string          `json:"code_version"`
	Seed          int64           `json:"seed"`
	Created       time.Time       `json:"created"`
	Digest        string          `json:"digest"`
	Rows          int64           `json:"rows"`
	Config        json.RawMessage `json:"config,omitempty"`
	Inputs        []format.Input  `json:"inputs"`
	Shards        []format.Output `json:"shards"`
	Timings       format.Timings  `json:"timings"`
	// Metrics are the stage's summary figures from the manifest (e.g. the memory
	// pass's P_mem, P_full and R^M split by what the memory holds).
	Metrics map[string]float64 `json:"metrics,omitempty"`
	Schema  []Field            `json:"schema"`
	Columns []ColumnStats      `json:"columns"`
	Head    []Cells            `json:"head"`
}

// Field is one column of the schema.
type Field struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	Nullable bool   `json:"nullable"`
}

// ColumnStats summarises one column over every row of the dataset.
type ColumnStats struct {
	Name  string `json:"name"`
	Type  string `json:"type"`
	Nulls int64  `json:"nulls"`
	// Values: numeric values (list elements for list columns; bool as 0/1).
	Values *NumStats `json:"values,omitempty"`
	// Lengths: elements per row of a list column.
	Lengths *NumStats `json:"lengths,omitempty"`
	// Distinct: distinct strings (list elements for list columns); a floor when
	// DistinctCapped.
	Distinct       int  `json:"distinct,omitempty"`
	DistinctCapped bool `json:"distinct_capped,omitempty"`

	strs map[string]struct{}
}

// NumStats are count, min, max and mean of numbers; NaNs are counted apart and left
// out of the rest, since one NaN reward is exactly what an audit looks for.
type NumStats struct {
	Count int64   `json:"count"`
	NaN   int64   `json:"nan,omitempty"`
	Min   float64 `json:"min"`
	Max   float64 `json:"max"`
	Mean  float64 `json:"mean"`
	sum   float64
}

func (n *NumStats) add(v float64) {
	if math.IsNaN(v) {
		n.NaN++
		return
	}
	if n.Count == 0 || v < n.Min {
		n.Min = v
	}
	if n.Count == 0 || v > n.Max {
		n.Max = v
	}
	n.Count++
	n.sum += v
	n.Mean = n.sum / float64(n.Count)
}

// Cells is one row as an ordered list of column name and JSON value.
type Cells []Cell

// Cell is one value of a head row.
type Cell struct {
	Name  string          `json:"name"`
	Value json.RawMessage `json:"value"`
}

// MarshalJSON writes a row as a JSON object with the columns in schema order.
func (c Cells) MarshalJSON() ([]byte, error) {
	var b strings.Builder
	b.WriteByte('{')
	for i, cell := range c {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(cell.Name)
		b.Write(k)
		b.WriteByte(':')
		b.Write(cell.Value)
	}
	b.WriteByte('}')
	return []byte(b.String()), nil
}

// UnmarshalJSON reads a row written by MarshalJSON, keeping the column order.
func (c *Cells) UnmarshalJSON(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return fmt.Errorf("row: want a JSON object")
	}
	*c = nil
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("row: %w", err)
		}
		name, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return fmt.Errorf("row: column %q: %w", name, err)
		}
		*c = append(*c, Cell{Name: name, Value: v})
	}
	return nil
}

// Inspect reads the dataset in dir: every shard is verified against the manifest and
// must be of the manifest's kind; statistics cover every row and head keeps the
// first head rows.
func Inspect(dir string, head int) (*Summary, error) {
	d, err := format.OpenDataset(dir)
	if err != nil {
		return nil, err
	}
	m := d.Manifest
	s := &Summary{
		Dir: dir, Kind: m.Kind, SchemaVersion: m.SchemaVersion, Stage: m.Stage, CacheKey: m.CacheKey,
		CodeVersion: m.CodeVersion, Seed: m.Seed, Created: m.Created, Digest: m.Digest(), Rows: m.Rows(),
		Config: m.Config, Inputs: m.Inputs, Shards: m.Outputs, Timings: m.Timings, Metrics: m.Metrics,
	}
	if d.Len() == 0 {
		if sc, _, ok := format.Schema(m.Kind); ok {
			s.setSchema(sc)
		}
		return s, nil
	}
	for i := range d.Len() {
		// Each record is held to the first shard's columns before its statistics are
		// added; the shard's schema is checked once more for a shard without rows.
		sc, err := d.Records(i, func(rec arrow.RecordBatch) error {
			if err := s.checkSchema(d.Path(i), rec.Schema()); err != nil {
				return err
			}
			return s.addRecord(rec, head)
		})
		if err == nil {
			err = s.checkSchema(d.Path(i), sc)
		}
		if err != nil {
			return nil, err
		}
	}
	for i := range s.Columns {
		c := &s.Columns[i]
		c.Distinct = len(c.strs)
	}
	return s, nil
}

func (s *Summary) setSchema(sc *arrow.Schema) {
	for _, f := range sc.Fields() {
		s.Schema = append(s.Schema, Field{Name: f.Name, Type: typeName(f.Type), Nullable: f.Nullable})
		s.Columns = append(s.Columns, ColumnStats{Name: f.Name, Type: typeName(f.Type)})
	}
}

// checkSchema holds every shard to the first one's columns.
func (s *Summary) checkSchema(path string, sc *arrow.Schema) error {
	if s.Schema == nil {
		s.setSchema(sc)
	}
	if sc.NumFields() != len(s.Columns) {
		return fmt.Errorf("read %s: %d columns, first shard has %d: %w", path, sc.NumFields(), len(s.Columns), format.ErrSchemaMismatch)
	}
	for i, f := range sc.Fields() {
		if f.Name != s.Columns[i].Name || typeName(f.Type) != s.Columns[i].Type {
			return fmt.Errorf("read %s: column %d is %q %s, first shard has %q %s: %w",
				path, i, f.Name, typeName(f.Type), s.Columns[i].Name, s.Columns[i].Type, format.ErrSchemaMismatch)
		}
	}
	return nil
}

func (s *Summary) addRecord(rec arrow.RecordBatch, head int) error {
	for i := range s.Columns {
		s.Columns[i].add(rec.Column(i), 0)
	}
	for r := 0; r < int(rec.NumRows()) && len(s.Head) < head; r++ {
		var row Cells
		for i, c := range s.Columns {
			v, err := marshalPlain(rec.Column(i).GetOneForMarshal(r))
			if err != nil {
				return fmt.Errorf("column %q: %w", c.Name, err)
			}
			row = append(row, Cell{Name: c.Name, Value: v})
		}
		s.Head = append(s.Head, row)
	}
	return nil
}

// marshalPlain is json.Marshal without HTML escaping: agent text is full of <mem>
// and <search> tags that must stay readable.
func marshalPlain(v any) (json.RawMessage, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// add accumulates a's values; depth > 0 means a holds the elements of a list column.
func (c *ColumnStats) add(a arrow.Array, depth int) {
	if depth == 0 {
		c.Nulls += int64(a.NullN())
	}
	num := func(f func(i int) float64) {
		if c.Values == nil {
			c.Values = &NumStats{}
		}
		for i := range a.Len() {
			if a.IsValid(i) {
				c.Values.add(f(i))
			}
		}
	}
	switch a := a.(type) {
	case *array.Int32:
		num(func(i int) float64 { return float64(a.Value(i)) })
	case *array.Int64:
		num(func(i int) float64 { return float64(a.Value(i)) })
	case *array.Float32:
		num(func(i int) float64 { return float64(a.Value(i)) })
	case *array.Float64:
		num(a.Value)
	case *array.Boolean:
		num(func(i int) float64 {
			if a.Value(i) {
				return 1
			}
			return 0
		})
	case *array.String:
		if c.strs == nil {
			c.strs = map[string]struct{}{}
		}
		for i := range a.Len() {
			if !a.IsValid(i) {
				continue
			}
			v := a.Value(i)
			if _, ok := c.strs[v]; ok {
				continue
			}
			if len(c.strs) >= maxDistinct {
				c.DistinctCapped = true
				continue
			}
			c.strs[strings.Clone(v)] = struct{}{}
		}
	case *array.List:
		if a.Len() == 0 {
			return
		}
		if depth == 0 && c.Lengths == nil {
			c.Lengths = &NumStats{}
		}
		for i := range a.Len() {
			if depth == 0 && a.IsValid(i) {
				lo, hi := a.ValueOffsets(i)
				c.Lengths.add(float64(hi - lo))
			}
		}
		first, _ := a.ValueOffsets(0)
		_, last := a.ValueOffsets(a.Len() - 1)
		vals := array.NewSlice(a.ListValues(), first, last)
		defer vals.Release()
		c.add(vals, depth+1)
	}
}

// typeName spells an Arrow type the way pyarrow and DuckDB users read it:
// list<float32>, list<list<string>>, string.
func typeName(t arrow.DataType) string {
	switch t := t.(type) {
	case *arrow.ListType:
		return "list<" + typeName(t.Elem()) + ">"
	case *arrow.StringType:
		return "string"
	}
	return t.String()
}

// WriteText writes s for a terminal: manifest, shards, per-column statistics and the
// first rows, long values cut to width.
func (s *Summary) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	p := func(format string, args ...any) { fmt.Fprintf(tw, format, args...) }
	p("dataset\t%s\n", s.Dir)
	p("kind\t%s (schema version %d)\n", s.Kind, s.SchemaVersion)
	p("stage\t%s\n", s.Stage)
	p("cache key\t%s\n", s.CacheKey)
	p("code\t%s\n", s.CodeVersion)
	p("seed\t%d\n", s.Seed)
	if !s.Created.IsZero() {
		p("created\t%s\n", s.Created.UTC().Format(time.RFC3339))
	}
	p("rows\t%d in %d shards\n", s.Rows, len(s.Shards))
	p("digest\t%s\n", s.Digest)
	if s.Timings.TotalS > 0 {
		p("time\t%.1fs", s.Timings.TotalS)
		if s.Timings.TokensPS > 0 {
			p(", %.0f tokens/s", s.Timings.TokensPS)
		}
		if s.Timings.PeakRSSMB > 0 {
			p(", peak RSS %.0f MB", s.Timings.PeakRSSMB)
		}
		p("\n")
	}
	if len(s.Timings.Phases) > 0 {
		var ph []string
		for _, k := range slices.Sorted(maps.Keys(s.Timings.Phases)) {
			ph = append(ph, fmt.Sprintf("%s %.1fs", k, s.Timings.Phases[k]))
		}
		p("phases\t%s\n", strings.Join(ph, ", "))
	}
	for _, in := range s.Inputs {
		p("input\t%s %s %s\n", in.Name, in.Path, in.Digest)
	}
	if len(s.Config) > 0 && string(s.Config) != "null" {
		p("config\t%s\n", cut(string(s.Config), 200))
	}
	if len(s.Metrics) > 0 {
		p("\nfigure\tvalue\n")
		for _, k := range slices.Sorted(maps.Keys(s.Metrics)) {
			p("%s\t%.4g\n", k, s.Metrics[k])
		}
	}
	p("\nshard\trows\tbytes\tsha256\n")
	for _, o := range s.Shards {
		p("%s\t%d\t%d\t%s\n", filepath.Base(o.File), o.Rows, o.Bytes, o.SHA256)
	}
	p("\ncolumn\ttype\tnulls\tstatistics\n")
	for _, c := range s.Columns {
		p("%s\t%s\t%d\t%s\n", c.Name, c.Type, c.Nulls, c.describe())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(s.Head) > 0 {
		fmt.Fprintf(w, "\nfirst %d rows\n", len(s.Head))
	}
	for i, row := range s.Head {
		fmt.Fprintf(w, "row %d\n", i)
		for _, cell := range row {
			if _, err := fmt.Fprintf(w, "  %s: %s\n", cell.Name, cut(string(cell.Value), 100)); err != nil {
				return err
			}
		}
	}
	return nil
}

func (c *ColumnStats) describe() string {
	var parts []string
	if c.Lengths != nil {
		parts = append(parts, "len "+c.Lengths.describe())
	}
	if c.Values != nil {
		label := ""
		if c.Lengths != nil {
			label = "values "
		}
		parts = append(parts, label+c.Values.describe())
	}
	if c.strs != nil || c.Distinct > 0 {
		floor := ""
		if c.DistinctCapped {
			floor = "≥"
		}
		parts = append(parts, fmt.Sprintf("distinct %s%d", floor, c.Distinct))
	}
	return strings.Join(parts, "; ")
}

func (n *NumStats) describe() string {
	if n.Count == 0 && n.NaN == 0 {
		return "empty"
	}
	s := fmt.Sprintf("min %.6g max %.6g mean %.6g", n.Min, n.Max, n.Mean)
	if n.NaN > 0 {
		s += fmt.Sprintf(" NaN %d", n.NaN)
	}
	return s
}

// cut shortens s to at most n runes, marking the cut.
func cut(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
