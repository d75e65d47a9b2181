// Package layout holds no code: its tests enforce the import rule of
// docs/architecture.md on the whole module, so the folders keep showing the architecture,
//
//	cmd → stages → {model, train, agent} → {jobs, format} → internal
//
// with audit on the stages' floor, and they hold docs/architecture.md to the code: every
// step, mempo subcommand, top-level folder and internal package it must name, and only
// those.
package layout
