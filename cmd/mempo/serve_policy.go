package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/mempo/mempo/cmd/internal/app"
	"github.com/mempo/mempo/cmd/internal/torchflag"
	"github.com/mempo/mempo/model/engine"
	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/model/serve"
	"github.com/mempo/mempo/model/torch"
)

// servePolicyCmd is what 'mempo serve-policy' resolves its flags into; the limits
// start from serve.DefaultConfig and engine.DefaultConfig, so --help shows
// their defaults.
type servePolicyCmd struct {
	cfg           serve.Config
	engine        engine.Config
	policy, name  string
	addr          string
	device, dtype string
	attention     string
}

func servePolicyCommand() *cli.Command {
	s := &servePolicyCmd{cfg: serve.DefaultConfig(), engine: engine.DefaultConfig(), addr: "127.0.0.1:8000", device: "cpu"}
	return app.Command(&cli.Command{
		Name:  "serve-policy",
		Usage: "serve a policy checkpoint under an OpenAI-compatible /v1/completions subset",
		Description: `Loads --policy once and answers POST /v1/completions for clients such as
'mempo-rollout --engine server --engine-url http://ADDR'. A request's "prompt" is a
list of token ids (a string is encoded with the checkpoint's tokenizer), or a list of
prompts; n asks for n completions of each (completion i samples with seed + i, as an
n = 1 request of that seed does), every completion counting against --max-inflight.
It takes
max_tokens, temperature (0 is greedy), top_p, top_k (0 or -1: all), seed (an
integer of 64 bits; the same seed and prompt give the same tokens, whatever else is
batched with them), stop (strings, kept at the end of the text as vLLM's
include_stop_str_in_output does; one of several tokens is matched on the decoded
text, as vLLM matches it, one of a single token on that token), stop_token_ids (vLLM's:
generation stops when one of those ids is sampled; stop_reason is the id), logprobs k
and echo (the prompt's text first and, with logprobs, its tokens' log-probs, the first
null). The answer has vLLM's layout: choices[i].text, .finish_reason ("stop" or
"length"), .stop_reason, .logprobs {tokens, token_logprobs, top_logprobs, text_offset}
with the tokens' log-probs and, for k > 0, the k most likely tokens at each position
(the sampled one added when not among them), and choices[i].token_ids, the generated
ids (vLLM's and SGLang's return_token_ids field, always filled here). Every log-prob is
log softmax(logits/T) over the whole vocabulary (T = 1 when greedy), before top-k and
top-p: vLLM's default raw log-probs at T = 1. "stream": true answers as server-sent
events, the OpenAI API's: chunks of each choice's text (and its tokens' log-probs)
carrying the choice's index, its last chunk with the finish and stop reasons, then
[DONE]; under echo a choice's first chunk starts with its prompt's text and, with
logprobs, its prompt tokens' log-probs, as vLLM streams them (with logprobs a choice's
chunks wait for the prompt's log-probs, which come when its prompt's first completion
ends). POST /v1/chat/completions takes "messages" (string or
text-part contents), renders them with the checkpoint's chat template (ChatML without
one) and the assistant's header, and answers in the chat layout (choices[i].message,
logprobs.content when "logprobs" is true, with top_logprobs alternatives each).
POST /tokenize {"prompt": "text"} and POST /detokenize {"tokens": [ids]} answer as
vLLM's do. GET /metrics exposes, in Prometheus' text format, requests by endpoint and
code, waiting and running completions, KV-cache slots used and total, prompt and
generated tokens, time to first token and time per output token (named after vLLM's,
mempo_ for vllm:). GET /v1/models lists the model as --served-model-name; GET /health
answers {"status": "ok"}. Not supported, and refused with a 400 naming the parameter:
best_of other than n, logprobs or top_logprobs over 20, penalties, logit_bias, guided
decoding, tools and any other key (a penalty of 0 or an empty logit_bias is served: it
changes nothing).

Batching is continuous: between any two decode steps, waiting requests join the
running batch in arrival order (each prefilled on its own, then its KV-cache rows
appended), and a finished request is answered and leaves at once, so short
completions do not wait for long ones. Requests of different sampling settings
share a step. A request joins while the batch stays within --max-batch rows and
--max-batch-tokens KV-cache slots (rows x slots, where every row reserves the
batch's longest context plus the most max_tokens any row has left); otherwise it
waits, and so do the requests behind it. A request alone always runs. Every
request samples from its own seeded stream: its tokens are those of the in-process
engine (mempo-rollout --engine local) for that request alone, whatever joins or
leaves around it; log-probs may differ in the last bits with the batch's shape.
With --prefix-cache-tokens, a request whose prompt begins with an earlier request's
prompt and completion reuses their KV cache and prefills only the rest (its
log-probs, and rarely a token, may then differ in the last bits).

Every request is bounded (see Limits): a refused one gets {"error": {"message",
"type", "code"}} naming the limit and its flag, with 413 for a body over
--max-body-bytes, 400 for a malformed request or a field out of range, 404 for
another model name, and 503 (with Retry-After) when --max-inflight requests are
already held; requests beyond that are refused, not queued. SIGINT or SIGTERM
stops accepting requests and lets those in flight finish.`,
	}, s.flags(), s.run)
}

func (s *servePolicyCmd) flags() *app.Flags {
	return app.Bind(nil, []app.Flag{
		app.String(&s.policy, cli.StringFlag{Name: "policy", Category: "Policy server", Required: true, TakesFile: true,
			Usage: "policy checkpoint `DIR` in HF layout (config.json, safetensors, tokenizer.json)"}),
		app.String(&s.name, cli.StringFlag{Name: "served-model-name", Category: "Policy server",
			Usage: "model `NAME` in /v1/models and answers (default: --policy as given, as vLLM names it)"}),
		app.String(&s.addr, cli.StringFlag{Name: "addr", Category: "Policy server", Usage: "host:port to listen on"}),
		app.Int(&s.engine.MaxRows, cli.IntFlag{Name: "max-batch", Category: "Policy server",
			Usage: "requests decoded together at most (rows of the running batch); more wait for a row to finish"}).Check(app.AtLeast(&s.engine.MaxRows, 1)),
		app.Int(&s.engine.TokenBudget, cli.IntFlag{Name: "max-batch-tokens", Category: "Policy server",
			Usage: "KV-cache token slots of the running batch at most: rows x (longest context + most max_tokens left); " +
				"a slot takes layers x 2 x kv_heads x head_dim values (57 KB for Qwen2.5-7B in bf16)"}).Check(app.AtLeast(&s.engine.TokenBudget, 1)),
		app.Int(&s.engine.PrefixCache, cli.IntFlag{Name: "prefix-cache-tokens", Category: "Policy server",
			Usage: "token slots of finished requests' KV cache kept, in host memory, least recently used out first: a request whose prompt " +
				"begins with an earlier one's prompt and completion (a full-context agent's next turn) or its prompt (another sample) " +
				"prefills only the rest; 0 keeps none, so a request's tokens do not depend on earlier ones even in the last bits"}).Check(app.AtLeast(&s.engine.PrefixCache, 0)),
	}, torchflag.Runtime(&s.device, &s.dtype, &s.attention), []app.Flag{
		app.Int(&s.cfg.MaxTokens, cli.IntFlag{Name: "max-tokens", Category: "Limits", Usage: "largest max_tokens a request may ask for; more is refused with 400"}),
		app.Int(&s.cfg.MaxStops, cli.IntFlag{Name: "max-stops", Category: "Limits", Usage: "most stop strings in one request; more is refused with 400"}),
		app.Int(&s.cfg.MaxStopBytes, cli.IntFlag{Name: "max-stop-bytes", Category: "Limits", Usage: "longest stop string, in bytes; longer is refused with 400"}),
		app.Int64(&s.cfg.MaxBodyBytes, cli.Int64Flag{Name: "max-body-bytes", Category: "Limits", Usage: "largest request body, in bytes; larger is refused with 413"}),
		app.Int(&s.cfg.MaxInflight, cli.IntFlag{Name: "max-inflight", Category: "Limits", Usage: "most completion requests held at once, waiting or generating; one more is refused with 503"}),
	}, timeoutFlags(&s.cfg.ReadHeaderTimeoutS, &s.cfg.ReadTimeoutS, &s.cfg.WriteTimeoutS, &s.cfg.IdleTimeoutS,
		"waiting and generation included; a request still waiting is then dropped"))
}

func (s *servePolicyCmd) run(c *cli.Context) error {
	if err := s.cfg.Validate(); err != nil {
		return app.Usage(err)
	}
	torch.BoundHeap()
	log := slog.Default()
	m, closeModel, err := serve.Open(serve.Policy{Dir: s.policy, Name: s.name, Engine: s.engine,
		Options: qwen2.Options{Device: s.device, DType: s.dtype, Attention: s.attention}}, log)
	if errors.Is(err, engine.ErrConfig) {
		return app.Usage(err)
	}
	if err != nil {
		return fmt.Errorf("--policy: %w", err)
	}
	defer closeModel()
	srv, err := serve.New(m, s.cfg, log)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("--addr %s: %w", s.addr, err)
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	log.Info("serving policy", "policy", s.policy, "model", m.Name, "url", "http://"+ln.Addr().String()+"/v1")
	return srv.Serve(ctx, ln)
}
