// Package formattest builds datasets for tests and fixtures that need one as input,
// without the stage runtime's cache, lock or resume.
package formattest

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/mempo/mempo/format"
)

// WriteDataset commits dir as a dataset with one shard per element of shards, without
// the stage runtime's cache, lock or resume. It is for tests and fixtures that need a
// dataset as input; stages commit through jobs. dir must not exist yet. opts go to
// every shard's writer, e.g. format.WithOptional for rows that fill optional columns.
func WriteDataset[R format.Row](dir, stage string, shards [][]R, opts ...format.Option) (*format.Dataset, error) {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("write dataset %s: %w", dir, err)
	}
	kind, version := format.KindOf[R]()
	m := &format.Manifest{Kind: kind, SchemaVersion: version, Stage: stage}
	for i, rows := range shards {
		out, err := format.WriteFile(filepath.Join(dir, format.ShardName(i)), rows, opts...)
		if err != nil {
			return nil, err
		}
		m.Outputs = append(m.Outputs, out)
	}
	if err := format.WriteManifest(dir, m); err != nil {
		return nil, err
	}
	return format.OpenDataset(dir)
}
