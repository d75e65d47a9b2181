package update

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/mempo/mempo/jobs"
)

// TestRecordedConfigKeysUnchanged replays configs as the stage recorded them (the
// config object of a trainer_state.json; every_runtime_field.json adds every runtime
// field a default config omits): decoded into Config and encoded back, each must give
// the recorded canonical JSON byte for byte. The cache key hashes that JSON, so a
// renamed, lost or re-tagged field, or one that moves into a nested object, fails here
// instead of silently changing every key.
func TestRecordedConfigKeysUnchanged(t *testing.T) {
	for _, name := range []string{"recorded_config.json", "every_runtime_field.json"} {
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", name))
			if err != nil {
				t.Fatal(err)
			}
			want, err := jobs.CanonicalJSON(json.RawMessage(data))
			if err != nil {
				t.Fatal(err)
			}
			var cfg Config
			d := json.NewDecoder(bytes.NewReader(data))
			d.DisallowUnknownFields()
			if err := d.Decode(&cfg); err != nil {
				t.Fatal(err)
			}
			got, err := jobs.CanonicalJSON(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("config re-encodes as\n%s\nrecorded\n%s", got, want)
			}
		})
	}
}
