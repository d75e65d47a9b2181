// Package internal holds no code: its folders are small primitives the whole module
// shares (renameio, stats, layout, httpserve, procstat, tensorboard, wait), each listed
// with what it holds in docs/architecture.md.
package internal
