package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/mempo/mempo/model/engine"
	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/model/sample"
)

// A streamed request ("stream": true) is answered with server-sent events as the
// OpenAI API sends them: "data: {chunk}" events, each the next piece of one choice's
// text (its "index" says which: n per prompt, in prompt order, as unstreamed), with
// that text's tokens' log-probs when asked for, the last chunk of a choice with its
// finish and stop reasons, then "data: [DONE]". The sampled tokens, text and
// log-probs are those of the same request unstreamed.
//
// Under echo (completions only) a choice's first chunk starts with its prompt, as
// vLLM's does: the prompt's text before the first generated text and, with logprobs,
// the prompt tokens' log-probs (the first null) before the first generated token's.
// The engine tells a prompt's log-probs with its completion, not as it samples, so
// with logprobs a choice's chunks are held until the first completion of its prompt
// ends (the choices of one prompt score it alike: each prefills it whole, under the
// same temperature); without them the prompt's text goes at once.

// CompletionChunk is one event of a streamed /v1/completions answer.
type CompletionChunk struct {
	ID      string        `json:"id"`
	Object  string        `json:"object"` // "text_completion"
	Created int64         `json:"created"`
	Model   string        `json:"model"`
	Choices []ChunkChoice `json:"choices"`
}

// ChunkChoice is the text a chunk adds to choice Index, with its tokens' log-probs
// when asked for; a choice's last chunk has its finish reason.
type ChunkChoice struct {
	Index        int       `json:"index"`
	Text         string    `json:"text"`
	Logprobs     *Logprobs `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
	StopReason   any       `json:"stop_reason"`
}

// ChatChunk is one event of a streamed /v1/chat/completions answer.
type ChatChunk struct {
	ID      string            `json:"id"`
	Object  string            `json:"object"` // "chat.completion.chunk"
	Created int64             `json:"created"`
	Model   string            `json:"model"`
	Choices []ChatChunkChoice `json:"choices"`
}

// ChatChunkChoice is the message delta a chunk adds to choice Index.
type ChatChunkChoice struct {
	Index        int           `json:"index"`
	Delta        ChatDelta     `json:"delta"`
	Logprobs     *ChatLogprobs `json:"logprobs"`
	FinishReason *string       `json:"finish_reason"`
	StopReason   any           `json:"stop_reason"`
}

// ChatDelta is the role, in a choice's first chunk, or the content's next piece.
type ChatDelta struct {
	Role    string `json:"role,omitempty"`
	Content string `json:"content,omitempty"`
}

// feed holds what a streamed job's engine hook has sampled, for the handler to read:
// the engine appends without waiting (the scheduler never waits for a client) and
// wakes the handler.
type feed struct {
	mu     sync.Mutex
	tokens []engine.Token
	wake   chan struct{} // buffered 1, shared by a request's jobs
}

func (f *feed) add(t engine.Token) {
	f.mu.Lock()
	f.tokens = append(f.tokens, t)
	f.mu.Unlock()
	select {
	case f.wake <- struct{}{}:
	default: // a wake-up is already pending
	}
}

// since is the tokens from the from-th on.
func (f *feed) since(from int) []engine.Token {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]engine.Token(nil), f.tokens[min(from, len(f.tokens)):]...)
}

// streamer sends a streamed request's events.
type streamer struct {
	s       *Server
	w       http.ResponseWriter
	flusher http.Flusher
	in      CompletionRequest
	chat    bool
	id      string
	created int64
	texts   bool // stop strings matched on the text: a choice's last token is held
}

// choiceStream is what one choice has sent so far.
type choiceStream struct {
	index int
	ids   []int32
	lps   []engine.Token
	text  int // bytes of text sent, the echoed prompt's included
	toks  int // generated tokens whose log-probs were sent
	lp    *lpWriter
	// Under echo: the prompt's ids and text, sent before anything else, with the
	// prompt's log-probs once known (scored), and whether they were sent.
	prompt []int64
	head   string
	scored *promptScore
	echoed bool
}

// promptScore is a prompt's log-probs, from the first of its completions to end.
type promptScore struct {
	known bool
	lps   []float32
	top   [][]sample.Logprob
}

// stream sends jobs' tokens as server-sent events while they generate: text in the
// completions layout, or as chat deltas when chat is set.
func (s *Server) stream(ctx context.Context, w http.ResponseWriter, req *http.Request, in CompletionRequest, jobs []*job, chat bool) *refusal {
	flusher, ok := w.(http.Flusher)
	if !ok {
		return refuse(http.StatusInternalServerError, "streaming is not supported by this connection")
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	stops, _ := s.stops(in.Stop)
	_, texts := s.splitStops(stops)
	st := &streamer{s: s, w: w, flusher: flusher, in: in, chat: chat, id: randomID(), created: s.now().Unix(), texts: len(texts) > 0}
	n := 1
	if in.N != nil {
		n = *in.N
	}
	choices := make([]*choiceStream, len(jobs))
	scores := make([]promptScore, (len(jobs)+n-1)/n) // per prompt; jobs are n per prompt, in order
	for i, j := range jobs {
		choices[i] = &choiceStream{index: i, echoed: !in.Echo}
		if in.Logprobs != nil {
			choices[i].lp = s.lpWriter(in)
		}
		if in.Echo {
			c := choices[i]
			c.prompt, c.head, c.scored = j.seq.Prompt, s.promptText(j.seq.Prompt), &scores[i/n]
			c.scored.known = c.scored.known || in.Logprobs == nil // no log-probs to wait for
		}
		if chat {
			st.send(i, ChatDelta{Role: "assistant"}, nil, nil, nil)
		}
	}
	finished := waitAll(ctx, jobs)
	for open := len(jobs); open > 0; {
		select {
		case <-jobs[0].feed.wake:
			for i, j := range jobs {
				st.advance(choices[i], j.feed.since(len(choices[i].ids)))
			}
		case f := <-finished:
			if f.r.err != nil {
				// The status is sent; the stream ends with the error as its last event.
				b, _ := json.Marshal(ErrorResponse{Error: ErrorBody{Message: f.r.err.Error(), Type: "InternalServerError", Code: http.StatusInternalServerError}})
				fmt.Fprintf(w, "data: %s\n\ndata: [DONE]\n\n", b)
				flusher.Flush()
				return nil
			}
			if c := choices[f.i]; c.scored != nil && !c.scored.known {
				// The prompt's log-probs are known: its choices' held chunks go now.
				*c.scored = promptScore{known: true, lps: f.r.c.PromptLogProbs, top: f.r.c.PromptTop}
				for i, j := range jobs {
					if choices[i].scored == c.scored && i != f.i {
						st.advance(choices[i], j.feed.since(len(choices[i].ids)))
					}
				}
			}
			st.finish(choices[f.i], jobs[f.i], f.r.c)
			open--
		case <-req.Context().Done():
			return nil // the client left; the scheduler drops the jobs
		}
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	flusher.Flush()
	return nil
}

// doneJob is job i's result.
type doneJob struct {
	i int
	r result
}

// waitAll reports each job's result as it arrives, until ctx is done.
func waitAll(ctx context.Context, jobs []*job) <-chan doneJob {
	out := make(chan doneJob, len(jobs))
	for i, j := range jobs {
		go func() {
			select {
			case r := <-j.done:
				out <- doneJob{i, r}
			case <-ctx.Done():
			}
		}()
	}
	return out
}

// advance takes a choice's new tokens and sends the text that is final (whole
// characters and, when stops are matched on the text, not the last token's, which a
// stop may cut), with the log-probs of the tokens it covers; under echo the prompt
// comes first, once its log-probs are known.
func (st *streamer) advance(c *choiceStream, toks []engine.Token) {
	if len(toks) == 0 && c.echoed {
		return
	}
	for _, t := range toks {
		c.ids = append(c.ids, int32(t.ID))
		c.lps = append(c.lps, t)
	}
	if !c.echoed && !c.scored.known {
		return // held until the prompt's log-probs are known
	}
	upto := c.ids
	if st.texts && len(upto) > 0 {
		upto = c.ids[:len(c.ids)-1]
	}
	text := c.head + wholeChars(st.s.m.Tok.Decode(upto))
	var lp *Logprobs
	if c.lp != nil && !c.echoed {
		lp = newLogprobs()
		c.lp.addPrompt(lp, c.prompt, c.scored.lps, c.scored.top)
	}
	if c.lp != nil && len(upto) > c.toks {
		if lp == nil {
			lp = newLogprobs()
		}
		for _, t := range c.lps[c.toks:len(upto)] {
			c.lp.add(lp, int32(t.ID), &t.LogProb, t.Top)
		}
		c.toks = len(upto)
	}
	if len(text) > c.text || lp != nil {
		st.send(c.index, ChatDelta{Content: text[min(c.text, len(text)):]}, lp, nil, nil)
		c.text = max(c.text, len(text))
	}
	c.echoed = true
}

// finish sends a choice's last chunk: the rest of its text and log-probs, and its
// finish and stop reasons.
func (st *streamer) finish(c *choiceStream, j *job, done qwen2.Completion) {
	st.advance(c, j.feed.since(len(c.ids))) // tokens told before the finish, not yet read
	ch := st.s.choice(st.in, j.seq.Prompt, done)
	var lp *Logprobs
	if c.lp != nil {
		lp = newLogprobs()
		c.lp.addGenerated(lp, done, c.toks)
	}
	finish := ch.FinishReason
	st.send(c.index, ChatDelta{Content: ch.Text[min(c.text, len(ch.Text)):]}, lp, &finish, ch.StopReason)
}

// send writes one chunk of choice index.
func (st *streamer) send(index int, d ChatDelta, lp *Logprobs, finish *string, stop any) {
	var chunk any
	if st.chat {
		var clp *ChatLogprobs
		if lp != nil {
			clp = chatLogprobs(lp, *st.in.Logprobs)
		}
		chunk = ChatChunk{ID: "chatcmpl-" + st.id, Object: "chat.completion.chunk", Created: st.created, Model: st.s.m.Name,
			Choices: []ChatChunkChoice{{Index: index, Delta: d, Logprobs: clp, FinishReason: finish, StopReason: stop}}}
	} else {
		chunk = CompletionChunk{ID: "cmpl-" + st.id, Object: "text_completion", Created: st.created, Model: st.s.m.Name,
			Choices: []ChunkChoice{{Index: index, Text: d.Content, Logprobs: lp, FinishReason: finish, StopReason: stop}}}
	}
	b, _ := json.Marshal(chunk)
	fmt.Fprintf(st.w, "data: %s\n\n", b)
	st.flusher.Flush()
}

// wholeChars is raw text without a trailing partial UTF-8 character, its invalid bytes
// replaced as a whole completion's text replaces them.
func wholeChars(raw string) string {
	for k := 1; k < utf8.UTFMax && k <= len(raw); k++ {
		if utf8.RuneStart(raw[len(raw)-k]) {
			if !utf8.FullRuneInString(raw[len(raw)-k:]) {
				raw = raw[:len(raw)-k]
			}
			break
		}
	}
	return strings.ToValidUTF8(raw, "\uFFFD")
}
