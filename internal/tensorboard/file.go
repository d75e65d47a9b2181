package tensorboard

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mempo/mempo/internal/renameio"
)

// FilePrefix starts the name of every event file TensorBoard's writers make.
const FilePrefix = "events.out.tfevents."

// FileName is the name TensorBoard's writers give an event file,
// events.out.tfevents.<unix seconds>.<host>.<pid>.<suffix>: the reader takes any file
// whose name holds "tfevents", and the leading time sorts files in the order they were
// written. suffix tells files of one process apart; "" leaves it out.
func FileName(t time.Time, host string, pid int, suffix string) string {
	name := fmt.Sprintf("%s%d.%s.%d", FilePrefix, t.Unix(), host, pid)
	if suffix != "" {
		name += "." + suffix
	}
	return name
}

// Encode frames events as the bytes of an event file.
func Encode(events []Event) []byte {
	var b []byte
	for _, e := range events {
		b = AppendRecord(b, e.Marshal())
	}
	return b
}

// Decode parses the bytes of an event file. A truncated last record is left out, as
// TensorBoard leaves it; a bad CRC or message is an error wrapping ErrCorrupt.
func Decode(b []byte) ([]Event, error) {
	recs, _, err := Records(b)
	if err != nil {
		return nil, err
	}
	evs := make([]Event, 0, len(recs))
	for i, r := range recs {
		e, err := Unmarshal(r)
		if err != nil {
			return nil, fmt.Errorf("record %d: %w", i, err)
		}
		evs = append(evs, e)
	}
	return evs, nil
}

// ReadFile reads the event file at path.
func ReadFile(path string) ([]Event, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	evs, err := Decode(b)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return evs, nil
}

// WriteFile writes events as the event file path, whole: into a temp file beside it
// whose name holds no "tfevents", so a TensorBoard watching the directory does not
// open it, then fsynced and renamed. A killed writer leaves at most that hidden temp
// file, never a partial event file.
func WriteFile(path string, events []Event) error {
	return renameio.WriteAs(path, ".events-*.tmp", func(w io.Writer) error {
		_, err := w.Write(Encode(events))
		return err
	})
}

// IsEventFile reports whether TensorBoard reads the file name as an event file.
func IsEventFile(name string) bool {
	return strings.Contains(filepath.Base(name), "tfevents")
}
