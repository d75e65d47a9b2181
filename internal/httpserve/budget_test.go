package httpserve

import (
	"errors"
	"io"
	"strings"
	"testing"
)

// TestBudget: bodies being read share a budget of bytes; a read past it fails with
// ErrBusy, and each body's bytes return to the budget when it is released.
func TestBudget(t *testing.T) {
	b := NewBudget(10)
	first := b.Reader(strings.NewReader("123456"))
	if _, err := io.ReadAll(first); err != nil {
		t.Fatalf("first body within the budget: %v", err)
	}
	second := b.Reader(strings.NewReader("abcdef"))
	if _, err := io.ReadAll(second); !errors.Is(err, ErrBusy) {
		t.Fatalf("second body past the budget: %v, want ErrBusy", err)
	}
	first.Release()
	second.Release()
	if got := b.Used(); got != 0 {
		t.Errorf("budget holds %d bytes after both released, want 0", got)
	}
	if _, err := io.ReadAll(b.Reader(strings.NewReader("abcdef"))); err != nil {
		t.Errorf("a body after the others released: %v", err)
	}
}
