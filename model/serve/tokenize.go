package serve

import (
	"encoding/json"
	"io"
	"net/http"
)

// TokenizeRequest is vLLM's POST /tokenize body for a completion prompt. This
// server's tokenizer adds no special tokens of its own, so add_special_tokens changes
// nothing and is accepted.
type TokenizeRequest struct {
	Model            string `json:"model,omitempty"`
	Prompt           string `json:"prompt"`
	AddSpecialTokens *bool  `json:"add_special_tokens,omitempty"`
}

// TokenizeResponse is vLLM's answer to /tokenize.
type TokenizeResponse struct {
	Count       int     `json:"count"`
	MaxModelLen int     `json:"max_model_len"`
	Tokens      []int32 `json:"tokens"`
}

// DetokenizeRequest is vLLM's POST /detokenize body.
type DetokenizeRequest struct {
	Model  string  `json:"model,omitempty"`
	Tokens []int32 `json:"tokens"`
}

// DetokenizeResponse is vLLM's answer to /detokenize.
type DetokenizeResponse struct {
	Prompt string `json:"prompt"`
}

// tokenize answers POST /tokenize with the ids /v1/completions gives the same string
// prompt.
func (s *Server) tokenize(w http.ResponseWriter, req *http.Request) {
	s.serveBody(w, req, func(body io.Reader) *refusal {
		var in TokenizeRequest
		if e := s.decodeStrict(w, body, &in, "tokenize", `{"prompt": "text"}`); e != nil {
			return e
		}
		if e := s.checkModel(in.Model); e != nil {
			return e
		}
		ids := s.m.Tok.Encode(in.Prompt)
		writeJSON(w, http.StatusOK, TokenizeResponse{Count: len(ids), MaxModelLen: s.m.MaxPositions, Tokens: ids})
		return nil
	})
}

// detokenize answers POST /detokenize with the text of the ids.
func (s *Server) detokenize(w http.ResponseWriter, req *http.Request) {
	s.serveBody(w, req, func(body io.Reader) *refusal {
		var in DetokenizeRequest
		if e := s.decodeStrict(w, body, &in, "detokenize", `{"tokens": [token ids]}`); e != nil {
			return e
		}
		if e := s.checkModel(in.Model); e != nil {
			return e
		}
		for _, id := range in.Tokens {
			if id < 0 || int(id) >= s.m.VocabSize {
				return refuse(http.StatusBadRequest, "token %d outside the vocabulary [0, %d)", id, s.m.VocabSize)
			}
		}
		writeJSON(w, http.StatusOK, DetokenizeResponse{Prompt: s.m.Tok.Decode(in.Tokens)})
		return nil
	})
}

// decodeStrict decodes body into v; a key v lacks is refused naming it, never ignored.
func (s *Server) decodeStrict(w http.ResponseWriter, body io.Reader, v any, kind, want string) *refusal {
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return s.bodyError(w, err, kind, want)
	}
	return nil
}
