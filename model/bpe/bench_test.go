package bpe

import (
	"fmt"
	"slices"
	"testing"
)

var sizes = []int{1 << 10, 16 << 10, 256 << 10}

// BenchmarkEncode reports throughput on mixed text (prose, Chinese, code, agent turns,
// whitespace) for a size sweep: warm is the steady state with the pre-token cache
// filled, cold empties it before every call.
func BenchmarkEncode(b *testing.B) {
	tok := qwen(b)
	for _, size := range sizes {
		text := corpus(13, size)
		for _, mode := range []string{"warm", "cold"} {
			b.Run(fmt.Sprintf("%s/%dKB", mode, size>>10), func(b *testing.B) {
				b.SetBytes(int64(len(text)))
				tokens := 0
				for b.Loop() {
					if mode == "cold" {
						tok.cache.mu.Lock()
						tok.cache.m = nil
						tok.cache.mu.Unlock()
					}
					tokens += len(tok.Encode(text))
				}
				b.ReportMetric(float64(tokens)/b.Elapsed().Seconds(), "tokens/s")
			})
		}
	}
}

func BenchmarkDecode(b *testing.B) {
	tok := qwen(b)
	for _, size := range sizes {
		ids := tok.Encode(corpus(14, size))
		b.Run(fmt.Sprintf("%dKB", size>>10), func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				tok.Decode(ids)
			}
			b.ReportMetric(float64(len(ids)*b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

// BenchmarkTrain trains the 4k vocabulary of a tiny model on a few MB.
func BenchmarkTrain(b *testing.B) {
	for _, mb := range []int{1, 4} {
		lines := corpusLines(15, mb<<20)
		b.Run(fmt.Sprintf("vocab4096/%dMB", mb), func(b *testing.B) {
			b.SetBytes(int64(mb << 20))
			for b.Loop() {
				if _, err := Train(slices.Values(lines), TrainConfig{VocabSize: 4096}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkLoadQwen(b *testing.B) {
	for b.Loop() {
		if _, err := Load(qwenPath); err != nil {
			b.Fatalf("%v; run build/fixtures.sh", err)
		}
	}
}
