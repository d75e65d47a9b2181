package search

import "testing"

func TestFormatDocs(t *testing.T) {
	tests := []struct {
		name string
		hits []Hit
		want string
	}{
		{"none", nil, ""},
		{
			// Search-R1 keeps the first line verbatim, quotes included.
			name: "from contents",
			hits: []Hit{
				{Contents: "\"Paris\"\nParis is the capital of France."},
				{Contents: "\"Seine\"\nA river.\nIt flows through Paris."},
			},
			want: "Doc 1(Title: \"Paris\") Paris is the capital of France.\n" +
				"Doc 2(Title: \"Seine\") A river.\nIt flows through Paris.\n",
		},
		{
			name: "title without text",
			hits: []Hit{{Contents: "\"Lonely\""}},
			want: "Doc 1(Title: \"Lonely\") \n",
		},
		{
			name: "hand-made hit without contents",
			hits: []Hit{{Title: "Paris", Text: "Capital."}},
			want: "Doc 1(Title: \"Paris\") Capital.\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := FormatDocs(tt.hits); got != tt.want {
				t.Errorf("FormatDocs = %q, want %q", got, tt.want)
			}
		})
	}
}
