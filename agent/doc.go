// Package agent holds no code: the folders below are the environment the policy acts in,
// in pure Go.
//
//	protocol  the turn format (<mem>, <think>, <search>, <answer>) and context policies
//	search    Search-R1 corpora, the BM25 index, the retrieval client and server
//	task      the synthetic multi-objective world, its expert oracle and retention
package agent
