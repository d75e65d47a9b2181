package eval

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/mempo/mempo/internal/renameio"
)

// reportPlots are the figures WriteReport draws against K.
var reportPlots = []struct {
	file, title, y string
	metric         Metric
}{
	{"f1_vs_k.png", "F1 vs number of objectives", "F1", F1},
	{"pt_vs_k.png", "Peak tokens vs number of objectives", "PT (tokens)", PT},
	{"success_vs_k.png", "Success rate vs number of objectives", "success", Success},
	{"retention_vs_k.png", "Retention of found facts vs number of objectives", "retention", Retention},
}

// WriteReport writes r into dir — results.md, results.csv (each atomically) and a PNG
// per metric against K with 95% error bars — and returns the names of the files it
// wrote. A metric known for no run (retention without the task's facts) gets no plot,
// and an earlier report's plot of it is removed.
func WriteReport(dir string, r *Report) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	var md, csv strings.Builder
	if err := r.WriteMarkdown(&md); err != nil {
		return nil, err
	}
	if err := r.WriteCSV(&csv); err != nil {
		return nil, err
	}
	files := []string{"results.md", "results.csv"}
	if err := renameio.WriteFile(filepath.Join(dir, files[0]), []byte(md.String())); err != nil {
		return nil, err
	}
	if err := renameio.WriteFile(filepath.Join(dir, files[1]), []byte(csv.String())); err != nil {
		return nil, err
	}
	for _, p := range reportPlots {
		series := ByK(r.Results, p.metric)
		known := false
		for _, s := range series {
			known = known || len(s.Points) > 0
		}
		if !known {
			// A plot left from an earlier report would no longer match results.md.
			if err := os.Remove(filepath.Join(dir, p.file)); err != nil && !os.IsNotExist(err) {
				return nil, fmt.Errorf("report: %w", err)
			}
			continue
		}
		title := p.title + " (bars: 95% interval)"
		if err := PlotPNG(filepath.Join(dir, p.file), title, "K", p.y, series); err != nil {
			return nil, err
		}
		files = append(files, p.file)
	}
	return files, nil
}
