package engine

import (
	"testing"

	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/model/sample"
	"github.com/mempo/mempo/model/torch"
)

// testConfig is qwen2's tiny preset over a vocabulary of 97, narrowed to two layers,
// with max_position_embeddings 64, as qwen2's own tests build it.
func testConfig() qwen2.Config {
	c, err := qwen2.Preset("tiny", 97)
	if err != nil {
		panic(err)
	}
	c.HiddenSize, c.IntermediateSize, c.NumLayers, c.NumHeads, c.NumKVHeads = 64, 96, 2, 4, 2
	c.MaxPositions = 64
	return c
}

// newTestModel is a model of c initialised from seed 7, dropped at the end of t.
func newTestModel(t testing.TB, c qwen2.Config, opt qwen2.Options) *qwen2.Model {
	t.Helper()
	m, err := qwen2.New(c, opt)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Init(7); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Drop)
	return m
}

// generate is m.Generate, failing t on an error.
func generate(t *testing.T, m *qwen2.Model, reqs []qwen2.Request, cfg sample.Config) []qwen2.Completion {
	t.Helper()
	out, err := m.Generate(reqs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// liveTensors counts the tensors not yet freed.
func liveTensors() int { return torch.Live() }
