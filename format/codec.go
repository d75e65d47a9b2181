package format

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// A layout maps one row type to its Arrow schema. It is built once per type, by
// reflection over the struct tags; rows are then moved in and out of Arrow arrays
// through field offsets and typed closures, so no reflection runs per row.
type layout struct {
	kind    Kind
	version int
	schema  *arrow.Schema // carries mempo.kind and mempo.schema_version as metadata
	cols    []column
}

type column struct {
	name   string
	offset uintptr // of the field within the row struct
	// optional marks a column added to a kind without a schema version bump: a shard
	// written without it still reads (the field stays zero), and a writer leaves it out
	// unless asked for it (WithOptional), so datasets that never fill it keep their bytes.
	optional bool
	// zero reports whether the field at p holds its zero value; set for optional columns.
	zero func(p unsafe.Pointer) bool
	codec
}

// A codec converts one Go field type to and from one Arrow column type.
type codec struct {
	typ      arrow.DataType
	nullable bool
	// enc binds to the column's builder and returns the per-row appender.
	enc func(b array.Builder) func(p unsafe.Pointer)
	// dec binds to a column array and returns the per-row setter; ok is false
	// when the array is not of the codec's type.
	dec func(a arrow.Array) (set func(i int, p unsafe.Pointer), ok bool)
}

var layouts = map[reflect.Type]*layout{}

func init() {
	register[Prompt](KindPrompts, PromptsVersion)
	register[Rollout](KindRollouts, RolloutsVersion)
	register[Score](KindScores, ScoresVersion)
	register[Logprob](KindLogprobs, LogprobsVersion)
	register[Advantage](KindAdvantages, AdvantagesVersion)
	register[Metric](KindMetrics, MetricsVersion)
}

// register builds R's layout. An untagged field or an unsupported field type is a
// programmer error in this package, so it panics at init and no test can miss it.
func register[R Row](k Kind, version int) {
	t := reflect.TypeFor[R]()
	l := &layout{kind: k, version: version}
	var fields []arrow.Field
	seen := map[string]bool{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, opt, _ := strings.Cut(f.Tag.Get("arrow"), ",")
		if name == "" || seen[name] || (opt != "" && opt != "optional") {
			panic(fmt.Sprintf("format: %s.%s: missing or duplicate arrow tag %q", t.Name(), f.Name, name))
		}
		seen[name] = true
		c, ok := codecFor(f.Type)
		if !ok {
			panic(fmt.Sprintf("format: %s.%s: unsupported field type %s", t.Name(), f.Name, f.Type))
		}
		col := column{name: name, offset: f.Offset, codec: c}
		if opt == "optional" {
			ft := f.Type
			col.optional = true
			col.zero = func(p unsafe.Pointer) bool { return reflect.NewAt(ft, p).Elem().IsZero() }
		}
		l.cols = append(l.cols, col)
		fields = append(fields, arrow.Field{Name: name, Type: c.typ, Nullable: c.nullable})
	}
	md := arrow.NewMetadata(
		[]string{MetaKind, MetaSchemaVersion},
		[]string{string(k), strconv.Itoa(version)},
	)
	l.schema = arrow.NewSchema(fields, &md)
	layouts[t] = l
}

func layoutFor[R Row]() *layout { return layouts[reflect.TypeFor[R]()] }

// without returns the schema of l less the optional columns not in keep, and for each
// column of l whether it is written.
func (l *layout) without(keep map[string]bool) (*arrow.Schema, []bool) {
	written := make([]bool, len(l.cols))
	var fields []arrow.Field
	for i, c := range l.cols {
		if written[i] = !c.optional || keep[c.name]; written[i] {
			fields = append(fields, l.schema.Field(i))
		}
	}
	md := l.schema.Metadata()
	return arrow.NewSchema(fields, &md), written
}

// OptionalColumns lists the optional columns of R's kind (see WithOptional).
func OptionalColumns[R Row]() []string {
	var out []string
	for _, c := range layoutFor[R]().cols {
		if c.optional {
			out = append(out, c.name)
		}
	}
	return out
}

// KindOf returns the shard kind and schema version that rows of type R are written as.
func KindOf[R Row]() (Kind, int) {
	l := layoutFor[R]()
	return l.kind, l.version
}

// layoutOf returns the layout of kind k, or nil for an unknown kind.
func layoutOf(k Kind) *layout {
	for _, l := range layouts {
		if l.kind == k {
			return l
		}
	}
	return nil
}

// Schema returns the Arrow schema and current schema version of kind k; ok is false
// for an unknown kind.
func Schema(k Kind) (s *arrow.Schema, version int, ok bool) {
	l := layoutOf(k)
	if l == nil {
		return nil, 0, false
	}
	return l.schema, l.version, true
}

func codecFor(t reflect.Type) (codec, bool) {
	switch t {
	case reflect.TypeFor[string]():
		return scalar[string, *array.StringBuilder, *array.String](arrow.BinaryTypes.String, strings.Clone), true
	case reflect.TypeFor[bool]():
		return scalar[bool, *array.BooleanBuilder, *array.Boolean](arrow.FixedWidthTypes.Boolean, nil), true
	case reflect.TypeFor[int32]():
		return scalar[int32, *array.Int32Builder, *array.Int32](arrow.PrimitiveTypes.Int32, nil), true
	case reflect.TypeFor[int64]():
		return scalar[int64, *array.Int64Builder, *array.Int64](arrow.PrimitiveTypes.Int64, nil), true
	case reflect.TypeFor[float32]():
		return scalar[float32, *array.Float32Builder, *array.Float32](arrow.PrimitiveTypes.Float32, nil), true
	case reflect.TypeFor[float64]():
		return scalar[float64, *array.Float64Builder, *array.Float64](arrow.PrimitiveTypes.Float64, nil), true
	case reflect.TypeFor[*int32]():
		return nullable[int32, *array.Int32Builder, *array.Int32](arrow.PrimitiveTypes.Int32, nil), true
	case reflect.TypeFor[*float32]():
		return nullable[float32, *array.Float32Builder, *array.Float32](arrow.PrimitiveTypes.Float32, nil), true
	case reflect.TypeFor[*float64]():
		return nullable[float64, *array.Float64Builder, *array.Float64](arrow.PrimitiveTypes.Float64, nil), true
	case reflect.TypeFor[[]int32]():
		return list[int32, *array.Int32Builder, *array.Int32](arrow.PrimitiveTypes.Int32, nil), true
	case reflect.TypeFor[[]int64]():
		return list[int64, *array.Int64Builder, *array.Int64](arrow.PrimitiveTypes.Int64, nil), true
	case reflect.TypeFor[[]float32]():
		return list[float32, *array.Float32Builder, *array.Float32](arrow.PrimitiveTypes.Float32, nil), true
	case reflect.TypeFor[[]string]():
		return list[string, *array.StringBuilder, *array.String](arrow.BinaryTypes.String, strings.Clone), true
	case reflect.TypeFor[[][]string]():
		return stringLists(), true
	}
	return codec{}, false
}

type builderOf[T any] interface {
	array.Builder
	Append(T)
	AppendValues([]T, []bool)
}

type arrayOf[T any] interface {
	arrow.Array
	Value(int) T
}

// scalar is a non-nullable column of T.
// clone, when set, copies a decoded value out of the Arrow buffer: String.Value
// aliases the buffer, which the reader releases (and a pool may reuse) after decoding.
func scalar[T any, B builderOf[T], A arrayOf[T]](dt arrow.DataType, clone func(T) T) codec {
	return codec{
		typ: dt,
		enc: func(b array.Builder) func(unsafe.Pointer) {
			tb := b.(B)
			return func(p unsafe.Pointer) { tb.Append(*(*T)(p)) }
		},
		dec: func(a arrow.Array) (func(int, unsafe.Pointer), bool) {
			ta, ok := a.(A)
			if !ok {
				return nil, false
			}
			return func(i int, p unsafe.Pointer) { *(*T)(p) = value(ta, i, clone) }, true
		},
	}
}

// nullable is a nullable column of T held in a *T field; nil is null.
func nullable[T any, B builderOf[T], A arrayOf[T]](dt arrow.DataType, clone func(T) T) codec {
	return codec{
		typ:      dt,
		nullable: true,
		enc: func(b array.Builder) func(unsafe.Pointer) {
			tb := b.(B)
			return func(p unsafe.Pointer) {
				if v := *(**T)(p); v != nil {
					tb.Append(*v)
				} else {
					tb.AppendNull()
				}
			}
		},
		dec: func(a arrow.Array) (func(int, unsafe.Pointer), bool) {
			ta, ok := a.(A)
			if !ok {
				return nil, false
			}
			return func(i int, p unsafe.Pointer) {
				if ta.IsNull(i) {
					*(**T)(p) = nil
					return
				}
				v := value(ta, i, clone)
				*(**T)(p) = &v
			}, true
		},
	}
}

// list is a non-nullable list<T> column held in a []T field. A nil slice is written as
// an empty list and an empty list reads back as nil.
func list[T any, B builderOf[T], A arrayOf[T]](elem arrow.DataType, clone func(T) T) codec {
	return codec{
		typ: arrow.ListOf(elem),
		enc: func(b array.Builder) func(unsafe.Pointer) {
			lb := b.(*array.ListBuilder)
			vb := lb.ValueBuilder().(B)
			return func(p unsafe.Pointer) {
				lb.Append(true)
				vb.AppendValues(*(*[]T)(p), nil)
			}
		},
		dec: func(a arrow.Array) (func(int, unsafe.Pointer), bool) {
			la, ok := a.(*array.List)
			if !ok {
				return nil, false
			}
			va, ok := la.ListValues().(A)
			if !ok {
				return nil, false
			}
			return func(i int, p unsafe.Pointer) { *(*[]T)(p) = listAt(la, va, i, clone) }, true
		},
	}
}

func value[T any, A arrayOf[T]](a A, i int, clone func(T) T) T {
	if clone != nil {
		return clone(a.Value(i))
	}
	return a.Value(i)
}

func listAt[T any, A arrayOf[T]](la *array.List, va A, i int, clone func(T) T) []T {
	lo, hi := la.ValueOffsets(i)
	if hi <= lo {
		return nil
	}
	s := make([]T, hi-lo)
	for j := range s {
		s[j] = value(va, int(lo)+j, clone)
	}
	return s
}

// stringLists is list<list<string>>: the gold aliases of each objective.
func stringLists() codec {
	return codec{
		typ: arrow.ListOf(arrow.ListOf(arrow.BinaryTypes.String)),
		enc: func(b array.Builder) func(unsafe.Pointer) {
			outer := b.(*array.ListBuilder)
			inner := outer.ValueBuilder().(*array.ListBuilder)
			sb := inner.ValueBuilder().(*array.StringBuilder)
			return func(p unsafe.Pointer) {
				outer.Append(true)
				for _, aliases := range *(*[][]string)(p) {
					inner.Append(true)
					sb.AppendValues(aliases, nil)
				}
			}
		},
		dec: func(a arrow.Array) (func(int, unsafe.Pointer), bool) {
			outer, ok := a.(*array.List)
			if !ok {
				return nil, false
			}
			inner, ok := outer.ListValues().(*array.List)
			if !ok {
				return nil, false
			}
			sa, ok := inner.ListValues().(*array.String)
			if !ok {
				return nil, false
			}
			return func(i int, p unsafe.Pointer) {
				lo, hi := outer.ValueOffsets(i)
				if hi <= lo {
					*(*[][]string)(p) = nil
					return
				}
				out := make([][]string, hi-lo)
				for j := range out {
					out[j] = listAt(inner, sa, int(lo)+j, strings.Clone)
				}
				*(*[][]string)(p) = out
			}, true
		},
	}
}
