package search

import (
	"errors"
	"io"
	"strings"
	"testing"
)

func TestBodyReaderCutsLongStrings(t *testing.T) {
	tests := []struct {
		name string
		body string
		want error
	}{
		{"strings within the limit", `{"queries": ["1234567", "1"], "topk": 123456789}`, nil},
		{"string over the limit", `{"queries": ["12345678"]}`, errLongString},
		{"escaped quote stays inside", `["\"123456"]`, errLongString},
		{"escaped backslash before the closing quote", `["12345\\", "1234567"]`, nil},
		{"long run outside strings", `[` + strings.Repeat("1,", 100) + `1]`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &bodyReader{r: strings.NewReader(tt.body), maxString: 7}
			got, err := io.ReadAll(b)
			if !errors.Is(err, tt.want) {
				t.Fatalf("ReadAll(%s) error = %v, want %v", tt.body, err, tt.want)
			}
			if tt.want == nil && string(got) != tt.body {
				t.Errorf("ReadAll(%s) = %s, want the body unchanged", tt.body, got)
			}
			if b.n != int64(len(got)) {
				t.Errorf("ReadAll(%s): counted %d bytes, read %d", tt.body, b.n, len(got))
			}
			if n, err := b.Read(make([]byte, 8)); tt.want != nil && (n != 0 || !errors.Is(err, tt.want)) {
				t.Errorf("Read after the cut = %d, %v; want 0, %v", n, err, tt.want)
			}
		})
	}
}
