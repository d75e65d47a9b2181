package eval

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// DiffMetrics are the metrics of the Markdown difference table (results.csv has all).
var DiffMetrics = []Metric{F1, EM, Success, Invalid, Retention, PT}

// cell formats an estimate as `mean [lo, hi]`, with a sign when signed; "–" when unknown.
func cell(e Estimate, m Metric, signed bool) string {
	if !e.Known() {
		return "–"
	}
	f := "%." + strconv.Itoa(metricInfo[m].decimals) + "f"
	if signed {
		f = "%+." + strconv.Itoa(metricInfo[m].decimals) + "f"
	}
	if math.IsNaN(e.Lo) {
		return fmt.Sprintf(f, e.Mean)
	}
	return fmt.Sprintf(f+" ["+f+", "+f+"]", e.Mean, e.Lo, e.Hi)
}

func mdLine(cells []string) string {
	return "| " + strings.Join(cells, " | ") + " |\n"
}

func mdHeader(cells []string) string {
	sep := make([]string, len(cells))
	for i := range sep {
		sep[i] = "---"
	}
	return mdLine(cells) + mdLine(sep)
}

// WriteMarkdown writes the report: one row per (policy, K) with every metric as
// `mean [95% interval]`, the differences against the baseline (when there is one) with
// `*` on those whose interval excludes zero, and a line saying how the intervals were
// made.
func (r *Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	head := []string{"policy", "K", "seeds", "questions"}
	for m := range NumMetrics {
		head = append(head, metricInfo[m].header)
	}
	b.WriteString(mdHeader(head))
	for _, res := range r.Results {
		cells := []string{res.Policy, strconv.Itoa(res.K), strconv.Itoa(res.Seeds), strconv.Itoa(res.Questions)}
		for m := range NumMetrics {
			cells = append(cells, cell(res.Values[m], m, false))
		}
		b.WriteString(mdLine(cells))
	}
	if r.Baseline != "" {
		fmt.Fprintf(&b, "\nDifference vs %s (policy − %s, paired by seed and question; * marks a 95%% interval that excludes 0):\n\n",
			r.Baseline, r.Baseline)
		head := []string{"policy", "K"}
		for _, m := range DiffMetrics {
			head = append(head, metricInfo[m].header)
		}
		b.WriteString(mdHeader(head))
		for _, res := range r.Results {
			if res.Diff == nil {
				continue
			}
			cells := []string{res.Policy, strconv.Itoa(res.K)}
			for _, m := range DiffMetrics {
				c := cell(res.Diff[m], m, true)
				if res.Diff[m].Known() && res.Diff[m].ExcludesZero() {
					c += " *"
				}
				cells = append(cells, c)
			}
			b.WriteString(mdLine(cells))
		}
	}
	b.WriteString("\n" + r.Method() + "\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// Method is the sentence that says what the cells and intervals are.
func (r *Report) Method() string {
	draw := fmt.Sprintf("over %d seeds (%s) and questions: each resample draws seeds and questions with replacement, "+
		"one question draw shared by every seed and policy", len(r.Seeds), strings.Join(r.Seeds, ", "))
	if len(r.Seeds) == 1 {
		draw = fmt.Sprintf("over questions (one seed, %s): each resample draws questions with replacement, "+
			"one draw shared by every policy", r.Seeds[0])
	}
	return fmt.Sprintf("Cells: mean over seeds and questions [95%% interval]; invalid and retention are ratios of sums. "+
		"Intervals: percentile bootstrap %s; B = %d resamples, --seed %d.", draw, r.Resamples, r.Seed)
}

// CSVHeader is results.csv's header. The file is in long form: one row per (policy, K,
// metric) with an empty baseline, then, for each policy other than the baseline, one
// row per metric named diff_<metric> holding policy − baseline. mean, lo and hi are
// empty where a metric is unknown.
var CSVHeader = []string{"policy", "k", "metric", "baseline", "mean", "lo", "hi", "seeds", "questions"}

// WriteCSV writes the report as results.csv (CSVHeader).
func (r *Report) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	cw.Write(CSVHeader)
	num := func(x float64) string {
		if math.IsNaN(x) {
			return ""
		}
		return strconv.FormatFloat(x, 'g', 6, 64)
	}
	row := func(res Result, metric, baseline string, e Estimate) {
		cw.Write([]string{res.Policy, strconv.Itoa(res.K), metric, baseline, num(e.Mean), num(e.Lo), num(e.Hi),
			strconv.Itoa(res.Seeds), strconv.Itoa(res.Questions)})
	}
	for _, res := range r.Results {
		for m := range NumMetrics {
			row(res, m.String(), "", res.Values[m])
		}
		if res.Diff != nil {
			for m := range NumMetrics {
				row(res, "diff_"+m.String(), r.Baseline, res.Diff[m])
			}
		}
	}
	cw.Flush()
	return cw.Error()
}
