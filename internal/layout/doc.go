// Package layout holds no code: its test enforces the import rule of DESIGN.md §1 on the
// whole module, so the folders keep showing the architecture.
//
//	cmd → stages → {model, train, agent} → {jobs, format} → internal
//
// No stage imports another stage; only model/ and train/ import gotch; train may use the
// model, the model and the agent use neither train nor each other; test harnesses
// (formattest, jobstest) are imported by tests only. view, the run viewer behind
// 'mempo view', sits on the stages' floor: it reads what stages commit and only cmd/
// imports it.
package layout
