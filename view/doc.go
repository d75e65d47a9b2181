// Package view serves a read-only web viewer over a run directory: the datasets and
// checkpoints the pipelines committed, one question's trajectories turn by turn with
// their scores, log-probs and advantages, a turn's tokens as a heat map of their
// advantages, and one question across iterations.
//
// It never writes into the run. Datasets are opened lazily, only when a page needs
// them, and a directory that is not a committed dataset (no manifest, or a manifest
// listing a shard that is missing or of the wrong size) is an error naming it. Model
// text is untrusted: the API returns it as JSON data and the pages insert it as text
// only, under a strict Content-Security-Policy.
package view
