package qwen2

// ForwardFLOPs is the matmul work of a forward pass over tokens positions of which
// scored get logits: 2 FLOPs per weight per position through the decoder layers, and
// 2·vocab·hidden per scored position for the head; attention scores are left out.
func (c Config) ForwardFLOPs(tokens, scored int) float64 {
	head := int64(c.VocabSize) * int64(c.HiddenSize)
	body := c.NumParams() - head
	if !c.TieEmbedding {
		body -= head
	}
	return 2*float64(body)*float64(tokens) + 2*float64(head)*float64(scored)
}
