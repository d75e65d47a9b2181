package task

import (
	"encoding/json"
	"fmt"
	"io"
)

// WriteJSONL writes one JSON object per line, without HTML escaping so tags and quotes
// stay readable. Corpus documents come out in Search-R1's layout: {"id","contents"}.
func WriteJSONL[T any](w io.Writer, rows []T) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for i, r := range rows {
		if err := enc.Encode(r); err != nil {
			return fmt.Errorf("write JSONL row %d: %w", i, err)
		}
	}
	return nil
}
