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
		w, err := Create[R](filepath.Join(dir, ShardName(i)))
		if err != nil {
			return nil, err
		}
		if err := w.Write(rows...); err != nil {
			w.Abort()
			return nil, err
		}
		if _, err := w.Close(); err != nil {
			return nil, err
		}
		m.Outputs = append(m.Outputs, w.Output())
	}
	if err := WriteManifest(dir, m); err != nil {
		return nil, err
	}
	return OpenDataset(dir)
}
