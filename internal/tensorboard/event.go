// Package tensorboard writes TensorBoard event files: TFRecord-framed tensorflow.Event
// protocol buffers holding scalar summaries, the format `tensorboard --logdir` reads
// and W&B ingests with `wandb sync --sync-tensorboard`. Only the few fields a scalar
// log needs are encoded (tensorflow/core/util/event.proto, summary.proto):
//
//	Event   {1: wall_time double, 2: step int64, 3: file_version string, 5: summary Summary}
//	Summary {1: repeated Value}
//	Value   {1: tag string, 2: simple_value float}
//
// A file is written whole, under a temp name without "tfevents" in it, then renamed
// (WriteFile): TensorBoard reads every file whose name holds "tfevents", so it never
// sees a partial one.
package tensorboard

import (
	"errors"
	"fmt"
	"math"
	"sort"

	"google.golang.org/protobuf/encoding/protowire"
)

// FileVersion is the file_version of the first event of a file. Version 2 makes
// TensorBoard's reader detect restarts by SessionLog events only, never by a step that
// goes back, so files written out of step order (a rerun of an earlier iteration) keep
// every point.
const FileVersion = "brain.Event:2"

// ErrCorrupt marks an event file that does not parse: a bad CRC, a record cut short,
// a malformed message.
var ErrCorrupt = errors.New("corrupt event file")

// Scalar is one point of a scalar series.
type Scalar struct {
	Tag   string
	Step  int64
	Value float64 // stored as a float32 simple_value, the type TensorBoard plots
}

// Value is one tagged number of an event's summary.
type Value struct {
	Tag   string
	Value float32
}

// Event is a tensorflow.Event with the fields this package writes.
type Event struct {
	WallTime    float64 // seconds since the Unix epoch
	Step        int64
	FileVersion string // set in a file's first event only
	Values      []Value
}

// Events lays out scalars as a file's events: the file_version event, then one event
// per step, in step order, holding that step's values in tag order. wall is the time
// every event is stamped with, in seconds since the Unix epoch.
func Events(wall float64, scalars []Scalar) []Event {
	s := append([]Scalar(nil), scalars...)
	sort.SliceStable(s, func(i, j int) bool {
		if s[i].Step != s[j].Step {
			return s[i].Step < s[j].Step
		}
		return s[i].Tag < s[j].Tag
	})
	evs := []Event{{WallTime: wall, FileVersion: FileVersion}}
	for i, sc := range s {
		if i == 0 || sc.Step != s[i-1].Step {
			evs = append(evs, Event{WallTime: wall, Step: sc.Step})
		}
		last := &evs[len(evs)-1]
		last.Values = append(last.Values, Value{Tag: sc.Tag, Value: float32(sc.Value)})
	}
	return evs
}

// Field numbers of event.proto and summary.proto.
const (
	eventWallTime    = 1
	eventStep        = 2
	eventFileVersion = 3
	eventSummary     = 5
	summaryValue     = 1
	valueTag         = 1
	valueSimple      = 2
)

// Marshal encodes e as protobuf's canonical serializer does (fields in number order,
// proto3 zero scalars left out), so the bytes equal Python's SerializeToString. The
// simple_value is written even when zero: it is a member of a oneof, whose absence
// would mean "no value".
func (e Event) Marshal() []byte {
	var b []byte
	if e.WallTime != 0 {
		b = protowire.AppendTag(b, eventWallTime, protowire.Fixed64Type)
		b = protowire.AppendFixed64(b, math.Float64bits(e.WallTime))
	}
	if e.Step != 0 {
		b = protowire.AppendTag(b, eventStep, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(e.Step))
	}
	if e.FileVersion != "" {
		b = protowire.AppendTag(b, eventFileVersion, protowire.BytesType)
		b = protowire.AppendString(b, e.FileVersion)
	}
	if len(e.Values) > 0 {
		var sum []byte
		for _, v := range e.Values {
			var val []byte
			if v.Tag != "" {
				val = protowire.AppendTag(val, valueTag, protowire.BytesType)
				val = protowire.AppendString(val, v.Tag)
			}
			val = protowire.AppendTag(val, valueSimple, protowire.Fixed32Type)
			val = protowire.AppendFixed32(val, math.Float32bits(v.Value))
			sum = protowire.AppendTag(sum, summaryValue, protowire.BytesType)
			sum = protowire.AppendBytes(sum, val)
		}
		b = protowire.AppendTag(b, eventSummary, protowire.BytesType)
		b = protowire.AppendBytes(b, sum)
	}
	return b
}

// Unmarshal decodes an Event, skipping fields this package does not write (a file of
// another writer may hold them), and values other than simple_value.
func Unmarshal(b []byte) (Event, error) {
	var e Event
	err := fields(b, func(num protowire.Number, typ protowire.Type, v uint64, data []byte) error {
		switch {
		case num == eventWallTime && typ == protowire.Fixed64Type:
			e.WallTime = math.Float64frombits(v)
		case num == eventStep && typ == protowire.VarintType:
			e.Step = int64(v)
		case num == eventFileVersion && typ == protowire.BytesType:
			e.FileVersion = string(data)
		case num == eventSummary && typ == protowire.BytesType:
			return fields(data, func(num protowire.Number, typ protowire.Type, _ uint64, data []byte) error {
				if num != summaryValue || typ != protowire.BytesType {
					return nil
				}
				val, ok := Value{}, false
				err := fields(data, func(num protowire.Number, typ protowire.Type, v uint64, data []byte) error {
					switch {
					case num == valueTag && typ == protowire.BytesType:
						val.Tag = string(data)
					case num == valueSimple && typ == protowire.Fixed32Type:
						val.Value, ok = math.Float32frombits(uint32(v)), true
					}
					return nil
				})
				if err == nil && ok {
					e.Values = append(e.Values, val)
				}
				return err
			})
		}
		return nil
	})
	return e, err
}

// fields walks the fields of one message, giving fn each field's number, wire type and
// its value: v for a varint or fixed field, data for a length-delimited one.
func fields(b []byte, fn func(num protowire.Number, typ protowire.Type, v uint64, data []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("field tag: %w: %w", protowire.ParseError(n), ErrCorrupt)
		}
		b = b[n:]
		var v uint64
		var data []byte
		switch typ {
		case protowire.VarintType:
			v, n = protowire.ConsumeVarint(b)
		case protowire.Fixed32Type:
			var v32 uint32
			v32, n = protowire.ConsumeFixed32(b)
			v = uint64(v32)
		case protowire.Fixed64Type:
			v, n = protowire.ConsumeFixed64(b)
		case protowire.BytesType:
			data, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return fmt.Errorf("field %d: %w: %w", num, protowire.ParseError(n), ErrCorrupt)
		}
		b = b[n:]
		if err := fn(num, typ, v, data); err != nil {
			return err
		}
	}
	return nil
}
