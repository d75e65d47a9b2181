package jobstest

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"

	"github.com/mempo/mempo/jobs"
)

// ReplayConfig decodes each recorded config file (a stage's config object as its
// trainer_state.json or manifest recorded it) into a C, unknown fields refused, and
// requires C to encode back to the recorded canonical JSON byte for byte. The cache key
// hashes that JSON, so a renamed, lost or re-tagged field, or one that moves into a
// nested object, fails the calling test instead of silently changing every key.
func ReplayConfig[C any](t *testing.T, files ...string) {
	t.Helper()
	for _, file := range files {
		t.Run(file, func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			want, err := jobs.CanonicalJSON(json.RawMessage(data))
			if err != nil {
				t.Fatal(err)
			}
			var cfg C
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
