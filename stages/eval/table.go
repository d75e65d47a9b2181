package eval

import (
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
)

var columns = []string{"policy", "K", "n", "F1", "EM", "success", "TT", "PT", "turns", "invalid", "retention"}

func (r Row) cells() []string {
	ret := "–"
	if r.Retention >= 0 {
		ret = fmt.Sprintf("%.3f", r.Retention)
	}
	return []string{r.Label, strconv.Itoa(r.K), strconv.Itoa(r.N),
		fmt.Sprintf("%.3f", r.F1), fmt.Sprintf("%.3f", r.EM), fmt.Sprintf("%.3f", r.Success),
		fmt.Sprintf("%.0f", r.TT), fmt.Sprintf("%.0f", r.PT), fmt.Sprintf("%.2f", r.Turns),
		fmt.Sprintf("%.3f", r.Invalid), ret}
}

// WriteMarkdown writes rows as a Markdown table, in the order given.
func WriteMarkdown(w io.Writer, rows []Row) error {
	line := func(cells []string) string {
		s := "|"
		for _, c := range cells {
			s += " " + c + " |"
		}
		return s + "\n"
	}
	out := line(columns)
	sep := make([]string, len(columns))
	for i := range sep {
		sep[i] = "---"
	}
	out += line(sep)
	for _, r := range rows {
		out += line(r.cells())
	}
	_, err := io.WriteString(w, out)
	return err
}

// WriteCSV writes rows as CSV with a header line.
func WriteCSV(w io.Writer, rows []Row) error {
	cw := csv.NewWriter(w)
	cw.Write(columns)
	for _, r := range rows {
		cw.Write(r.cells())
	}
	cw.Flush()
	return cw.Error()
}
