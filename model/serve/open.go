package serve

import (
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/model/bpe"
	"github.com/mempo/mempo/model/chat"
	"github.com/mempo/mempo/model/engine"
	"github.com/mempo/mempo/model/qwen2"
)

// Policy is a checkpoint to serve and how: its directory, the name it is served
// under, the options its weights load with and its engine's limits.
type Policy struct {
	Dir     string
	Name    string // "" serves it under Dir, as vLLM names a model by its path
	Options qwen2.Options
	Engine  engine.Config
}

// Open loads p's tokenizer, weights and chat template (ChatML, with a warning, where
// the checkpoint has none), checks that the tokenizer fits the weights, and starts the
// continuous-batching engine: the Model a Server serves. close stops the engine and
// frees the weights. An engine limit out of range wraps engine.ErrConfig; log (nil:
// nowhere) gets the chat template's warning.
func Open(p Policy, log *slog.Logger) (m Model, close func(), err error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tok, err := bpe.Load(filepath.Join(p.Dir, format.TokenizerFile))
	if err != nil {
		return Model{}, nil, fmt.Errorf("policy %s: %w", p.Dir, err)
	}
	tmpl, err := chat.ForCheckpoint(p.Dir, chat.FromCheckpoint, log)
	if err != nil {
		return Model{}, nil, fmt.Errorf("policy %s: %w", p.Dir, err)
	}
	q, err := qwen2.Load(p.Dir, p.Options)
	if err != nil {
		return Model{}, nil, fmt.Errorf("policy %s: %w", p.Dir, err)
	}
	if err := q.Config.CheckTokenizer(tok, bpe.ImStart, bpe.ImEnd); err != nil {
		q.Drop()
		return Model{}, nil, fmt.Errorf("policy %s: %w", p.Dir, err)
	}
	eng, err := engine.New(q, p.Engine)
	if err != nil {
		q.Drop()
		return Model{}, nil, err
	}
	name := p.Name
	if name == "" {
		name = p.Dir
	}
	m = Model{Name: name, Engine: eng, Tok: tok, Chat: tmpl, MaxPositions: q.Config.MaxPositions, VocabSize: q.Config.VocabSize}
	return m, func() { eng.Close(); q.Drop() }, nil
}
