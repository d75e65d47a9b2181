package serve

import (
	"bytes"
	"encoding/json"
	"net/http"
	"reflect"
	"slices"
	"strings"
)

// A parameter of OpenAI's or vLLM's completions API that the server does not
// implement is refused naming it, never ignored: a client asking for a repetition
// penalty must not get unpenalized text and believe otherwise. Clients that send every
// parameter at its neutral value (LangChain sends frequency_penalty 0, logit_bias {})
// are served: at that value the parameter changes nothing.

// neutral is each parameter the server does not implement and the JSON values at which
// it changes nothing ("null" always does).
var neutral = map[string][]string{
	"frequency_penalty":      {"0", "0.0"},
	"presence_penalty":       {"0", "0.0"},
	"repetition_penalty":     {"1", "1.0"},
	"length_penalty":         {"1", "1.0"},
	"min_p":                  {"0", "0.0"},
	"min_tokens":             {"0"},
	"logit_bias":             {"{}"},
	"suffix":                 {`""`},
	"ignore_eos":             {"false"},
	"use_beam_search":        {"false"},
	"bad_words":              {"[]"},
	"allowed_token_ids":      {"[]"},
	"guided_json":            {},
	"guided_regex":           {},
	"guided_choice":          {},
	"guided_grammar":         {},
	"response_format":        {},
	"prompt_logprobs":        {"0"},
	"truncate_prompt_tokens": {},
}

// informational are parameters that ask nothing of generation.
var informational = []string{"user", "request_id", "priority", "add_special_tokens", "spaces_between_special_tokens"}

// completionKeys and chatKeys are every key CompletionRequest and ChatRequest read.
var (
	completionKeys = jsonKeys(reflect.TypeOf(CompletionRequest{}))
	chatKeys       = jsonKeys(reflect.TypeOf(ChatRequest{}))
)

func jsonKeys(t reflect.Type) []string {
	var keys []string
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		keys = append(keys, name)
	}
	return keys
}

// checkParams refuses the first parameter of body, a JSON object, that is none of the
// known keys of its endpoint and is set to anything but its neutral value, in key order.
func checkParams(body []byte, known []string) *refusal {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return nil // the decode into CompletionRequest says what is wrong
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if slices.Contains(known, k) || slices.Contains(informational, k) {
			continue
		}
		values, ok := neutral[k]
		v := bytes.TrimSpace(fields[k])
		switch {
		case !ok:
			return refuse(http.StatusBadRequest, "parameter %s is not supported by this server (it implements %s)", k, strings.Join(known, ", "))
		case string(v) == "null" || slices.Contains(values, string(v)):
			continue
		}
		want := "null"
		if len(values) > 0 {
			want = values[0]
		}
		return refuse(http.StatusBadRequest, "%s %s is not supported by this server; leave it out or send %s", k, v, want)
	}
	return nil
}
