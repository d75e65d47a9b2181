package audit

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/mempo/mempo/agent/search"
	"github.com/mempo/mempo/agent/task"
	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/jobs"
)

// Verify checks the committed directory dir by its commit record (a dataset's
// _manifest.json, a checkpoint's or an index's checkpoint.json, a task's task.json) and
// returns a one-line summary; the error names every file that is missing or differs.
func Verify(dir string) (string, error) {
	has := func(name string) bool {
		_, err := os.Lstat(filepath.Join(dir, name))
		return err == nil
	}
	switch {
	case has(format.ManifestName):
		return verifyDataset(dir)
	case has(format.CommitFile):
		return verifyCheckpoint(dir)
	case has(task.SummaryFile):
		return verifyTask(dir)
	case has(search.MetaFile):
		// An index written before indexes had a commit record: opening it says so.
		_, err := search.ReadMeta(dir)
		return "", err
	}
	if _, err := os.Stat(dir); err != nil {
		return "", fmt.Errorf("verify: %w", err)
	}
	return "", fmt.Errorf("verify %s: no commit record (%s, %s or %s): not a directory a mempo stage committed, or an interrupted one",
		dir, format.ManifestName, format.CommitFile, task.SummaryFile)
}

func verifyDataset(dir string) (string, error) {
	d, err := format.OpenDataset(dir)
	if err != nil {
		return "", err
	}
	if err := d.Verify(); err != nil {
		return "", err
	}
	if err := d.CheckRows(10); err != nil {
		return "", err
	}
	return d.String(), nil
}

// verifyCheckpoint re-hashes every file the commit record lists and refuses files it
// does not list (the run record jobs.MetricsName and dot files aside, as at commit). An
// index's record (stage search.Stage) is then also opened as an index (verifyIndex).
func verifyCheckpoint(dir string) (string, error) {
	c, err := format.ReadCommit(dir)
	if err != nil {
		return "", err
	}
	errs := []error{c.Verify(dir)}
	var bytes int64
	for _, f := range c.Files {
		bytes += f.Bytes
	}
	err = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		rel = filepath.ToSlash(rel)
		if _, ok := c.File(rel); !ok && rel != format.CommitFile && rel != jobs.MetricsName && d.Name()[0] != '.' {
			errs = append(errs, fmt.Errorf("%s: not listed in %s (added after the %s stage committed the checkpoint): %w",
				path, format.CommitFile, c.Stage, format.ErrNotCheckpoint))
		}
		return nil
	})
	if err := errors.Join(append(errs, err)...); err != nil {
		return "", err
	}
	files := fmt.Sprintf("%d files, %d bytes", len(c.Files), bytes)
	if c.Stage == search.Stage {
		return verifyIndex(dir, c, files)
	}
	return fmt.Sprintf("checkpoint of stage %s, %s", c.Stage, files), nil
}

// verifyTask checks a task directory: the corpus by its sha256 and every prompts
// dataset as a dataset, matched with what task.json records of it.
func verifyTask(dir string) (string, error) {
	path := filepath.Join(dir, task.SummaryFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("verify: %w", err)
	}
	var s task.Summary
	if err := json.Unmarshal(b, &s); err != nil {
		return "", fmt.Errorf("verify %s: %w: %w", path, err, format.ErrCorrupt)
	}
	var errs []error
	corpus := filepath.Join(dir, task.CorpusFile)
	if sum, _, err := format.Checksum(corpus); err != nil {
		errs = append(errs, fmt.Errorf("verify %s: %w", corpus, err))
	} else if sum != s.Corpus.SHA256 {
		errs = append(errs, fmt.Errorf("verify %s: sha256 %s, %s records %s: %w", corpus, sum, task.SummaryFile, s.Corpus.SHA256, format.ErrCorrupt))
	}
	var rows int64
	for _, ds := range s.Datasets {
		sub := filepath.Join(dir, filepath.FromSlash(ds.Dir))
		if _, err := verifyDataset(sub); err != nil {
			errs = append(errs, err)
			continue
		}
		m, err := format.ReadManifest(sub)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if m.Digest() != ds.Digest || m.Rows() != ds.Rows {
			errs = append(errs, fmt.Errorf("verify %s: digest %.12s… with %d rows, %s records %.12s… with %d rows: %w",
				sub, m.Digest(), m.Rows(), task.SummaryFile, ds.Digest, ds.Rows, format.ErrCorrupt))
		}
		rows += m.Rows()
	}
	if err := errors.Join(errs...); err != nil {
		return "", fmt.Errorf("%w (rerun mempo gen-task --force to rebuild it)", err)
	}
	return fmt.Sprintf("task, %d documents, %d prompts datasets, %d prompts", s.Corpus.Docs, len(s.Datasets), rows), nil
}

// verifyIndex checks a retrieval index whose files verifyCheckpoint has verified:
// bleve opens them read-only and counts the documents mempo_index.json records
// (search.OpenLocal). The corpus, an input recorded by path and sha256, is compared
// when still at hand.
func verifyIndex(dir string, c *format.Commit, files string) (string, error) {
	l, err := search.OpenLocal(dir, search.LocalConfig{Workers: 1})
	if err != nil {
		return "", err
	}
	m := l.Meta()
	if err := l.Close(); err != nil {
		return "", fmt.Errorf("verify %s: %w", dir, err)
	}
	corpus := "corpus not at hand"
	for _, in := range c.Inputs {
		if in.Name != "corpus" {
			continue
		}
		if sum, _, err := format.Checksum(in.Path); err == nil {
			corpus = "corpus unchanged"
			if sum != m.Corpus.SHA256 {
				corpus = fmt.Sprintf("corpus %s changed since (sha256 %.12s…, indexed %.12s…)", in.Path, sum, m.Corpus.SHA256)
			}
		}
	}
	return fmt.Sprintf("index of %d passages, %s, %s", m.Docs, files, corpus), nil
}
