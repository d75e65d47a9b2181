package serve

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics is what GET /metrics exposes, in Prometheus' text format, under names that
// follow vLLM's (vllm:num_requests_running → mempo_num_requests_running, …) so that a
// dashboard of one reads the other.
type metrics struct {
	reg              *prometheus.Registry
	requests         *prometheus.CounterVec
	waiting, running prometheus.Gauge
	slotsUsed        prometheus.Gauge
	slotsTotal       prometheus.Gauge
	promptTokens     prometheus.Counter
	generatedTokens  prometheus.Counter
	ttft, perToken   prometheus.Histogram
}

// SlotUser is an engine that reports its KV-cache slots: those its running rows hold
// and the most it may hold (engine.Engine).
type SlotUser interface {
	Slots() (used, total int)
}

func newMetrics() *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	f := func(c prometheus.Collector) { m.reg.MustRegister(c) }
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mempo_requests_total",
		Help: "HTTP requests answered, by endpoint and status code."}, []string{"endpoint", "code"})
	m.waiting = prometheus.NewGauge(prometheus.GaugeOpts{Name: "mempo_num_requests_waiting",
		Help: "Completions waiting for room in the running batch."})
	m.running = prometheus.NewGauge(prometheus.GaugeOpts{Name: "mempo_num_requests_running",
		Help: "Completions in the running batch."})
	m.slotsUsed = prometheus.NewGauge(prometheus.GaugeOpts{Name: "mempo_kv_cache_slots_used",
		Help: "KV-cache token slots the running batch holds (rows x padded length)."})
	m.slotsTotal = prometheus.NewGauge(prometheus.GaugeOpts{Name: "mempo_kv_cache_slots_total",
		Help: "KV-cache token slots the batch may hold (--max-batch-tokens)."})
	m.promptTokens = prometheus.NewCounter(prometheus.CounterOpts{Name: "mempo_prompt_tokens_total",
		Help: "Prompt tokens prefilled."})
	m.generatedTokens = prometheus.NewCounter(prometheus.CounterOpts{Name: "mempo_generation_tokens_total",
		Help: "Tokens generated."})
	m.ttft = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "mempo_time_to_first_token_seconds",
		Help: "From a completion's arrival to its first token (waiting and prefill).", Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)})
	m.perToken = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "mempo_time_per_output_token_seconds",
		Help: "A finished completion's decode time per token after its first.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)})
	for _, c := range []prometheus.Collector{m.requests, m.waiting, m.running, m.slotsUsed, m.slotsTotal,
		m.promptTokens, m.generatedTokens, m.ttft, m.perToken} {
		f(c)
	}
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// answered counts one request of endpoint answered with code.
func (m *metrics) answered(endpoint string, code int) {
	m.requests.WithLabelValues(endpoint, strconv.Itoa(code)).Inc()
}

// batch records the scheduler's state after a loop: waiting and running completions
// and, where the engine reports them, its KV-cache slots.
func (m *metrics) batch(waiting, running int, eng Engine) {
	m.waiting.Set(float64(waiting))
	m.running.Set(float64(running))
	if su, ok := eng.(SlotUser); ok {
		used, total := su.Slots()
		m.slotsUsed.Set(float64(used))
		m.slotsTotal.Set(float64(total))
	}
}

// started records a completion whose prompt was prefilled and first token sampled.
func (m *metrics) started(j *job) {
	m.promptTokens.Add(float64(len(j.seq.Prompt)))
	m.ttft.Observe(j.start.Sub(j.arrived).Seconds())
}

// finished records a completion of n tokens that finished at end.
func (m *metrics) finished(j *job, n int, end time.Time) {
	m.generatedTokens.Add(float64(n))
	if n > 1 {
		m.perToken.Observe(end.Sub(j.start).Seconds() / float64(n-1))
	}
}
