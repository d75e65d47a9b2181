// Package protocol is the agent protocol of DESIGN.md §6: the description of the turn
// format (tags, prompt template, observation format, chat glue), the parser that turns a
// generated response into an action and a memory span in response tokens, the context
// policies mempo, mem1 and full, and a model-agnostic episode driver that advances a batch
// of trajectories turn by turn. It is pure Go; the caller owns generation and retrieval.
package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
)

// ErrProtocol is the class of every invalid protocol description.
var ErrProtocol = errors.New("invalid protocol description")

// Tag is an opening and closing marker pair such as <mem> and </mem>. Both empty means
// the block is not part of the format.
type Tag struct {
	Open  string `json:"open"`
	Close string `json:"close"`
}

func (t Tag) absent() bool { return t.Open == "" && t.Close == "" }

// Protocol describes one agent turn format. The zero value is not usable; start from
// Default or Load. Templates use {name} placeholders replaced verbatim.
type Protocol struct {
	// Name labels the description in logs and manifests.
	Name string `json:"name"`
	// Memory is the block the agent rewrites every turn (MemPO <mem>; MEM1 uses <think>).
	// Its span, tags included, is what the memory advantage applies to. Absent: no memory.
	Memory Tag `json:"memory"`
	// Think is the reasoning block after the memory. Absent: no separate thought.
	Think Tag `json:"think"`
	// Search and Answer are the two actions; generation stops after either closing tag.
	Search Tag `json:"search"`
	Answer Tag `json:"answer"`
	// SearchJSON, when set, says the search block holds a JSON function call and names the
	// dotted path of the query inside it (Qwen tool calls: "arguments.query").
	SearchJSON string `json:"search_json"`
	// AnswerSeparator joins the K answers of a multi-objective question ("; ").
	AnswerSeparator string `json:"answer_separator"`
	// MemoryProbe is the text MemPO's memory pass puts between a memory (or the full
	// history) and the answer tag before it scores the gold answer. Empty is DESIGN.md
	// §7's "<mem>m</mem><answer>a*"; a policy that always thinks before it answers
	// (a small model cloned from a scripted agent) predicts the answer from its memory
	// only after its usual thought, e.g. "<think>I have found every part, so I answer.</think>".
	MemoryProbe string `json:"memory_probe,omitempty"`
	// Lenient accepts Search-R1's rule: the first complete action block anywhere in the
	// response, with any text around it and the memory and thought blocks optional.
	// Otherwise the response must be exactly memory, thought, one action.
	Lenient bool `json:"lenient"`
	// ChatTemplate is the chat glue around the first prompt: {system} and {user}. It ends with
	// the assistant header, so every later response and observation continue one message.
	ChatTemplate string `json:"chat_template"`
	// System is the system message.
	System string `json:"system"`
	// User is the user message: {question} (K objectives joined by the separator) and {k}.
	User string `json:"user"`
	// Observation wraps the retrieved documents: {docs}. Any chat glue a format needs
	// between an action and its tool result (e.g. <|im_end|> and a tool role header)
	// belongs here.
	ObservationFormat string `json:"observation"`
	// Doc formats one document: {i} (1-based rank), {title}, {text}.
	DocFormat string `json:"doc"`
	// Invalid is the observation after a turn without a valid action.
	Invalid string `json:"invalid"`
	// LastTurn is appended to the observation that precedes the last allowed turn.
	LastTurn string `json:"last_turn"`
	// Trailing lists text that may follow the action besides whitespace (end-of-turn
	// tokens a generator might emit together with the stop string).
	Trailing []string `json:"trailing"`
}

// Chat renders the first context's system message (none when empty) and user message
// into the prompt text, ending with the assistant's header: a checkpoint's own chat
// template (model/chat) in place of the description's ChatTemplate glue.
type Chat interface {
	Prompt(system, user string) (string, error)
}

// invalidSearchR1 is Search-R1's corrective observation, byte for byte: in
// PeterGriffinJin/Search-R1, search_r1/llm_agent/generation.py, execute_predictions
// appends it for a response with neither a <search> nor an <answer> block (the Python
// source splits the literal with backslash line continuations, which add no characters).
const invalidSearchR1 = "\nMy previous action is invalid. " +
	"If I want to search, I should put the query between <search> and </search>. " +
	"If I want to give the final answer, I should put the answer between <answer> and </answer>. " +
	"Let me try again.\n"

// defaultUser follows Search-R1's instruction prompt (scripts/data_process/nq_search.py)
// with MemPO's memory block added in front of the reasoning and the K-answer format.
const defaultUser = "Answer the given question. At the start of every turn, write everything you must remember " +
	"inside <mem> and </mem>: older turns are removed from your context and only your latest memory, " +
	"action and information are kept. Then reason inside <think> and </think>. After reasoning, if you " +
	"find you lack some knowledge, you can call a search engine by <search> query </search> and it will " +
	"return the top searched results between <information> and </information>. You can search as many " +
	"times as you want. If you find no further external knowledge needed, you can directly provide the " +
	"answer inside <answer> and </answer>, without detailed illustrations. The question has {k} parts " +
	"separated by \"; \"; answer all of them in order, separated by \"; \". For example, " +
	"<answer> Beijing; 1987 </answer>. Question: {question}\n"

// Default returns the built-in MemPO description of DESIGN.md §6 with Qwen2 ChatML glue.
func Default() *Protocol {
	return &Protocol{
		Name:            "mempo",
		Memory:          Tag{"<mem>", "</mem>"},
		Think:           Tag{"<think>", "</think>"},
		Search:          Tag{"<search>", "</search>"},
		Answer:          Tag{"<answer>", "</answer>"},
		AnswerSeparator: "; ",
		ChatTemplate:    "<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n",
		System:          "You are a helpful assistant.",
		User:            defaultUser,
		// Search-R1 wraps the stripped passages as "\n\n<information>…</information>\n\n".
		ObservationFormat: "\n\n<information>{docs}</information>\n\n",
		// Search-R1's _passages2string: title is the first line of contents, text the rest.
		DocFormat: "Doc {i}(Title: {title}) {text}\n",
		Invalid:   invalidSearchR1,
		LastTurn:  "\nThis is my last turn. I must give the final answer between <answer> and </answer> now.\n",
		Trailing:  []string{"<|im_end|>", "<|endoftext|>"},
	}
}

// Load reads a JSON description from path. Keys left out keep the built-in default, so a
// file states only what differs; unknown keys are an error.
func Load(path string) (*Protocol, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read protocol %s: %w", path, err)
	}
	p, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("protocol %s: %w", path, err)
	}
	return p, nil
}

// FromConfig reads the protocol a stage's resolved config (a manifest's "config", JSON)
// holds under "protocol"; ok is false when it holds none.
func FromConfig(config []byte) (p *Protocol, ok bool, err error) {
	var cfg struct {
		Protocol json.RawMessage `json:"protocol"`
	}
	if len(config) > 0 {
		if err := json.Unmarshal(config, &cfg); err != nil {
			return nil, false, fmt.Errorf("config: %w", err)
		}
	}
	if len(cfg.Protocol) == 0 {
		return nil, false, nil
	}
	p, err = Parse(cfg.Protocol)
	return p, err == nil, err
}

// Parse decodes a JSON description over the defaults and validates it.
func Parse(data []byte) (*Protocol, error) {
	p := Default()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(p); err != nil {
		return nil, fmt.Errorf("decode: %w (keys: see protocol.Protocol json tags): %w", err, ErrProtocol)
	}
	if dec.More() {
		return nil, fmt.Errorf("trailing data after the JSON object: %w", ErrProtocol)
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return p, nil
}

// Validate reports the first inconsistency in the description.
func (p *Protocol) Validate() error {
	for _, c := range []struct {
		name string
		tag  Tag
		need bool
	}{{"memory", p.Memory, false}, {"think", p.Think, false}, {"search", p.Search, true}, {"answer", p.Answer, true}} {
		if c.tag.absent() && !c.need {
			continue
		}
		if c.tag.Open == "" || c.tag.Close == "" {
			return fmt.Errorf("key %q: open %q and close %q must both be set: %w", c.name, c.tag.Open, c.tag.Close, ErrProtocol)
		}
		if c.tag.Open == c.tag.Close {
			return fmt.Errorf("key %q: open and close are both %q: %w", c.name, c.tag.Open, ErrProtocol)
		}
	}
	if p.Search.Open == p.Answer.Open {
		return fmt.Errorf("keys \"search\" and \"answer\" share the opening tag %q: %w", p.Search.Open, ErrProtocol)
	}
	if p.Memory.Open != "" && p.Memory.Open == p.Think.Open {
		return fmt.Errorf("keys \"memory\" and \"think\" share the opening tag %q; for MEM1-style memory set \"think\" to {\"open\": \"\", \"close\": \"\"}: %w", p.Memory.Open, ErrProtocol)
	}
	if strings.TrimSpace(p.AnswerSeparator) == "" {
		return fmt.Errorf("key \"answer_separator\" %q must hold a non-space character: %w", p.AnswerSeparator, ErrProtocol)
	}
	for _, c := range []struct{ key, text, ph string }{
		{"chat_template", p.ChatTemplate, "{user}"},
		{"user", p.User, "{question}"},
		{"observation", p.ObservationFormat, "{docs}"},
	} {
		if !strings.Contains(c.text, c.ph) {
			return fmt.Errorf("key %q lacks the placeholder %s: %w", c.key, c.ph, ErrProtocol)
		}
	}
	if !strings.Contains(p.DocFormat, "{title}") && !strings.Contains(p.DocFormat, "{text}") {
		return fmt.Errorf("key \"doc\" has neither {title} nor {text}: %w", ErrProtocol)
	}
	if p.Invalid == "" {
		return fmt.Errorf("key \"invalid\" is empty; the agent needs a corrective observation: %w", ErrProtocol)
	}
	return nil
}

// Stops returns the strings after which generation of a turn must stop.
func (p *Protocol) Stops() []string { return []string{p.Search.Close, p.Answer.Close} }

// UserMessage is the user message of a question with K objectives.
func (p *Protocol) UserMessage(question string, k int) string {
	return strings.NewReplacer("{question}", question, "{k}", fmt.Sprint(k)).Replace(p.User)
}

// Prompt renders the first context with the description's chat glue: ChatTemplate
// around the system message and the user message with the question's K objectives.
func (p *Protocol) Prompt(question string, k int) string {
	return p.glue(p.System, p.UserMessage(question, k))
}

// glue is ChatTemplate around system and user, in one pass, so a message holding
// "{user}" is not expanded twice.
func (p *Protocol) glue(system, user string) string {
	return strings.NewReplacer("{system}", system, "{user}", user).Replace(p.ChatTemplate)
}

// render is the first context of system and user messages, with chat or, when chat is
// nil, the glue.
func (p *Protocol) render(chat Chat, system, user string) (string, error) {
	if chat == nil {
		return p.glue(system, user), nil
	}
	text, err := chat.Prompt(system, user)
	if err != nil {
		return "", fmt.Errorf("first context of %.40q: %w", user, err)
	}
	return text, nil
}

// Doc is one retrieved document in Search-R1's corpus layout: contents is the quoted
// title on the first line, then the text.
type Doc struct {
	ID       string `json:"id"`
	Contents string `json:"contents"`
}

// Title is the first line of the contents, as Search-R1 takes it (quotes kept).
func (d Doc) Title() string {
	title, _, _ := strings.Cut(d.Contents, "\n")
	return title
}

// Text is everything after the first line.
func (d Doc) Text() string {
	_, text, _ := strings.Cut(d.Contents, "\n")
	return text
}

// Observation renders retrieved documents. Like Search-R1, the joined passages are
// stripped of surrounding whitespace before wrapping.
func (p *Protocol) Observation(docs []Doc) string {
	var b strings.Builder
	for i, d := range docs {
		b.WriteString(strings.NewReplacer("{i}", fmt.Sprint(i+1), "{title}", d.Title(), "{text}", d.Text()).Replace(p.DocFormat))
	}
	return strings.ReplaceAll(p.ObservationFormat, "{docs}", strings.TrimSpace(b.String()))
}

// Answers splits an answer argument into its K answers, trimming each.
func (p *Protocol) Answers(arg string) []string {
	parts := strings.Split(arg, strings.TrimSpace(p.AnswerSeparator))
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts
}

// JoinAnswers joins K answers with the separator.
func (p *Protocol) JoinAnswers(answers []string) string {
	return strings.Join(answers, p.AnswerSeparator)
}
