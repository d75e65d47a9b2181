package serve

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"
)

// A streamed request ("stream": true) is answered with server-sent events as the
// OpenAI API sends them: one "data: {chunk}" event per new piece of text, the last
// chunk with the finish and stop reasons, then "data: [DONE]". One completion of one
// prompt is streamed; the sampled tokens and their text are those of the same request
// unstreamed.

// CompletionChunk is one event of a streamed /v1/completions answer.
type CompletionChunk struct {
	ID      string        `json:"id"`
	Object  string        `json:"object"` // "text_completion"
	Created int64         `json:"created"`
	Model   string        `json:"model"`
	Choices []ChunkChoice `json:"choices"`
}

// ChunkChoice is the text a chunk adds; the last chunk has the finish reason.
type ChunkChoice struct {
	Index        int     `json:"index"`
	Text         string  `json:"text"`
	FinishReason *string `json:"finish_reason"`
	StopReason   *string `json:"stop_reason"`
}

// ChatChunk is one event of a streamed /v1/chat/completions answer.
type ChatChunk struct {
	ID      string            `json:"id"`
	Object  string            `json:"object"` // "chat.completion.chunk"
	Created int64             `json:"created"`
	Model   string            `json:"model"`
	Choices []ChatChunkChoice `json:"choices"`
}

// ChatChunkChoice is the message delta a chunk adds.
type ChatChunkChoice struct {
	Index        int       `json:"index"`
	Delta        ChatDelta `json:"delta"`
	FinishReason *string   `json:"finish_reason"`
	StopReason   *string   `json:"stop_reason"`
}

// ChatDelta is the role, in the first chunk, or the content's next piece.
type ChatDelta struct {
	Role    string `json:"role,omitempty"`
	Content string `json:"content,omitempty"`
}

// streamed checks that a streamed request asks for what streaming serves.
func streamed(in CompletionRequest, jobs []*job) *refusal {
	switch {
	case len(jobs) != 1:
		return refuse(http.StatusBadRequest, "stream with n > 1 or several prompts is not supported; send one request per completion")
	case in.Logprobs != nil:
		return refuse(http.StatusBadRequest, "logprobs with stream is not supported; leave one out")
	}
	return nil
}

// stream sends j's tokens as server-sent events while it generates: text in the
// completions layout, or as chat deltas when chat is set.
func (s *Server) stream(w http.ResponseWriter, req *http.Request, in CompletionRequest, j *job, chat bool) *refusal {
	flusher, ok := w.(http.Flusher)
	if !ok {
		return refuse(http.StatusInternalServerError, "streaming is not supported by this connection")
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	id, created := randomID(), s.now().Unix()
	send := func(text string, finish, stop *string, first bool) {
		var chunk any
		if chat {
			d := ChatDelta{Content: text}
			if first {
				d.Role = "assistant"
			}
			chunk = ChatChunk{ID: "chatcmpl-" + id, Object: "chat.completion.chunk", Created: created, Model: s.m.Name,
				Choices: []ChatChunkChoice{{Delta: d, FinishReason: finish, StopReason: stop}}}
		} else {
			chunk = CompletionChunk{ID: "cmpl-" + id, Object: "text_completion", Created: created, Model: s.m.Name,
				Choices: []ChunkChoice{{Text: text, FinishReason: finish, StopReason: stop}}}
		}
		b, _ := json.Marshal(chunk)
		fmt.Fprintf(w, "data: %s\n\n", b)
		flusher.Flush()
	}
	if chat {
		send("", nil, nil, true)
	}
	// Text is sent as far as it is final: whole characters, and, when stop strings
	// are matched on the text, not the last token's, which a stop may cut.
	stops, _ := s.stops(in.Stop)
	_, texts := s.splitStops(stops)
	var ids []int32
	sent := 0
	add := func(tok int64) {
		ids = append(ids, int32(tok))
		upto := ids
		if len(texts) > 0 {
			upto = ids[:len(ids)-1]
		}
		if text := wholeChars(s.m.Tok.Decode(upto)); len(text) > sent {
			send(text[sent:], nil, nil, false)
			sent = len(text)
		}
	}
	for {
		select {
		case tok := <-j.tokens:
			add(tok)
		case r := <-j.done:
			if r.err != nil {
				// The status is sent; the stream ends with the error as its last event.
				b, _ := json.Marshal(ErrorResponse{Error: ErrorBody{Message: r.err.Error(), Type: "InternalServerError", Code: http.StatusInternalServerError}})
				fmt.Fprintf(w, "data: %s\n\ndata: [DONE]\n\n", b)
				flusher.Flush()
				return nil
			}
			for len(j.tokens) > 0 { // tokens told before the finish, not yet sent
				add(<-j.tokens)
			}
			c := s.choice(in, r.c)
			finish := c.FinishReason
			send(c.Text[min(sent, len(c.Text)):], &finish, c.StopReason, false)
			fmt.Fprint(w, "data: [DONE]\n\n")
			flusher.Flush()
			return nil
		case <-req.Context().Done():
			return nil // the client left; the scheduler drops the job
		}
	}
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

// onToken is the engine's hook that hands a streamed job its tokens; the buffer holds
// every token the job may generate, so the engine never waits for the client.
func (j *job) onToken(tok int64) { j.tokens <- tok }
