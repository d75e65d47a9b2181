package serve

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func postTo(t *testing.T, url, body string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatalf("answer is not JSON: %v", err)
	}
	return resp.StatusCode, v
}

// TestTokenize: /tokenize gives the ids /v1/completions takes a string prompt as, in
// vLLM's layout, and /detokenize turns them back; another model, an unknown key and an
// id outside the vocabulary are refused naming them.
func TestTokenize(t *testing.T) {
	_, ts := newTestServer(t, &echo{}, DefaultConfig())
	status, got := postTo(t, ts.URL+"/tokenize", `{"model": "tiny", "prompt": "hi!", "add_special_tokens": true}`)
	want := map[string]any{"count": 3.0, "max_model_len": 64.0, "tokens": []any{104.0, 105.0, 33.0}}
	if status != http.StatusOK || !cmp.Equal(got, want) {
		t.Errorf("/tokenize = %d %v, want 200 %v", status, got, want)
	}
	status, got = postTo(t, ts.URL+"/detokenize", `{"tokens": [104, 105, 33]}`)
	if status != http.StatusOK || got["prompt"] != "hi!" {
		t.Errorf("/detokenize = %d %v, want 200 hi!", status, got)
	}
	for _, tt := range []struct {
		path, body string
		status     int
		names      string
	}{
		{"/tokenize", `{"model": "other", "prompt": "a"}`, http.StatusNotFound, "other"},
		{"/tokenize", `{"prompt": "a", "return_token_strs": true}`, http.StatusBadRequest, "return_token_strs"},
		{"/detokenize", `{"tokens": [300]}`, http.StatusBadRequest, "300"},
	} {
		status, got := postTo(t, ts.URL+tt.path, tt.body)
		msg, _ := got["error"].(map[string]any)["message"].(string)
		if status != tt.status || !strings.Contains(msg, tt.names) {
			t.Errorf("%s %s = %d %q, want %d naming %s", tt.path, tt.body, status, msg, tt.status, tt.names)
		}
	}
}
