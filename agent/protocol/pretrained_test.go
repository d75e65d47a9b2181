package protocol

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mempo/mempo/model/bpe"
)

// TestTagsOnPretrainedTokenizer: on a pretrained tokenizer that lacks the agent's tags
// (the Qwen3 fixture, which holds <think> and </think> as added tokens that are not
// special, and none of the others), the tags are plain text: <mem> and the action tags
// encode as several ordinary tokens, some merged with their neighbours. The turn still
// parses from the response tokens, the memory's token span covers every token that
// holds a byte of <mem>…</mem> and no other, and no tag is a special token, so a
// decoder that skips special tokens keeps them all.
func TestTagsOnPretrainedTokenizer(t *testing.T) {
	tok, err := bpe.Load(filepath.Join("..", "..", "model", "bpe", "testdata", "qwen3", "tokenizer.json"))
	if err != nil {
		t.Fatalf("%v; run build/fixtures.sh", err)
	}
	p := Default()
	for _, tag := range []string{"<mem>", "</mem>", "<search>", "</search>", "<answer>", "</answer>", "<information>", "<think>"} {
		if _, special := tok.Special(tag); special {
			t.Errorf("%s is a special token of the fixture; skip_special_tokens would drop it", tag)
		}
	}
	if n := len(tok.Encode("<mem>")); n < 2 {
		t.Errorf("<mem> encodes to %d token(s); the fixture was expected to lack it", n)
	}
	response := p.Render("Ada Rivera founded Acme in 1987.", "I need where she was born.", Search, "Ada Rivera birthplace")
	ids := tok.Encode(response)
	pieces := Pieces(tok, ids)
	if got := strings.Join(pieces, ""); got != response {
		t.Fatalf("pieces join to %q, want the response %q", got, response)
	}
	turn := p.ParseTokens(pieces)
	if turn.Kind != Search || turn.Arg != "Ada Rivera birthplace" || turn.Memory != "Ada Rivera founded Acme in 1987." {
		t.Fatalf("parsed %+v, want a search with its memory", turn)
	}
	// The memory span: exactly the tokens overlapping its bytes.
	off := 0
	for i, piece := range pieces {
		lo, hi := off, off+len(piece)
		off = hi
		overlaps := lo < turn.MemBytes.End && hi > turn.MemBytes.Start
		inside := i >= turn.MemTokens.Start && i < turn.MemTokens.End
		if overlaps != inside {
			t.Errorf("token %d %q (bytes %d-%d): in memory span %v, overlaps the memory's bytes %v", i, piece, lo, hi, inside, overlaps)
		}
	}
	mem := strings.Join(pieces[turn.MemTokens.Start:turn.MemTokens.End], "")
	if !strings.Contains(mem, "<mem>") || !strings.Contains(mem, "</mem>") {
		t.Errorf("memory tokens %q do not hold both tags", mem)
	}
}

// failingChat is a chat template that fails to render.
type failingChat struct{}

func (failingChat) Prompt(system, user string) (string, error) {
	return "", errors.New("template raised: no system role")
}

// TestFirstContextChat: an episode's first context comes from its chat when it has one,
// and a chat that fails fails NewEpisode with its message.
func TestFirstContextChat(t *testing.T) {
	p := Default()
	tok := tagTok(p)
	if _, err := NewEpisode(p, failingChat{}, tok, DefaultConfig(), "q", 1); err == nil || !strings.Contains(err.Error(), "no system role") {
		t.Errorf("NewEpisode with a failing chat: %v, want its error", err)
	}
	e, err := NewEpisode(p, upperChat{}, tok, DefaultConfig(), "q", 1)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tok.Decode(e.Prompt()), strings.ToUpper(p.System+"|"+p.UserMessage("q", 1)); got != want {
		t.Errorf("first context %q, want %q", got, want)
	}
}

// upperChat renders system|user in upper case.
type upperChat struct{}

func (upperChat) Prompt(system, user string) (string, error) {
	return strings.ToUpper(system + "|" + user), nil
}
