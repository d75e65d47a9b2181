package format

import (
	"fmt"
	"os"
	"path/filepath"
)

// WriteDataset commits dir as a dataset with one shard per element of shards, without
// the stage runtime's cache, lock or resume. It is for tests and fixtures that need a
// dataset as input; stages commit through jobs. dir must not exist yet.
func WriteDataset[R Row](dir, stage string, shards [][]R) (*Dataset, error) {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("write dataset %s: %w", dir, err)
	}
	l := layoutFor[R]()
	m := &Manifest{Kind: l.kind, SchemaVersion: l.version, Stage: stage}
	for i, rows := range shards {
		out, err := WriteFile(filepath.Join(dir, ShardName(i)), rows)
		if err != nil {
			return nil, err
		}
		m.Outputs = append(m.Outputs, out)
	}
	if err := WriteManifest(dir, m); err != nil {
		return nil, err
	}
	return OpenDataset(dir)
}
