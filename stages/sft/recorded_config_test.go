package sft

import (
	"testing"

	"github.com/mempo/mempo/jobs/jobstest"
)

// TestRecordedConfigKeysUnchanged replays configs as the stage recorded them (the
// config object of a trainer_state.json; every_runtime_field.json adds every runtime
// field a default config omits): each must re-encode to its canonical JSON, the cache
// key's preimage, byte for byte.
func TestRecordedConfigKeysUnchanged(t *testing.T) {
	jobstest.ReplayConfig[Config](t, "testdata/recorded_config.json", "testdata/every_runtime_field.json")
}
