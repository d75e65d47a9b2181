// Package format defines the data contracts between stages: the Arrow schema of every
// shard kind, Parquet shards (zstd, schema and kind in the file metadata), dataset
// directories committed by a manifest, and a checkpoint's commit record and trainer
// state, with their readers and verifiers (DESIGN.md §3). It is pure Go.
package format

// Kind names a shard kind; it is stored in each Parquet file as mempo.kind.
type Kind string

const (
	KindPrompts    Kind = "prompts"
	KindRollouts   Kind = "rollouts"
	KindScores     Kind = "scores"
	KindLogprobs   Kind = "logprobs"
	KindAdvantages Kind = "advantages"
	KindMetrics    Kind = "metrics"
)

// Metadata keys stored in every shard's Parquet key-value metadata.
const (
	MetaKind          = "mempo.kind"
	MetaSchemaVersion = "mempo.schema_version"
)
