package render

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/inboxbench/inboxbench/config"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/inboxbench/inboxbench/results"
	"github.com/inboxbench/inboxbench/results/schema"
)

// A published site (`bench publish`) is a directory of static pages:
//
//	index.html               every run found, newest first, benchmark and conformance runs together
//	runs/RUN/report.html     the run's report (copied, or rendered here when the run had none)
//	runs/RUN/result.json …   the run's files as they were (conform.json, report.md, CSVs)
//	trends/WORKLOAD.html     each recurring cell of a workload over time
//	schema/*.schema.json     the JSON Schemas of the files (results/schema)
//
// Like report.html, no page fetches anything (no script, font or style
// sheet; charts are inline SVG) and every link is relative, so the
// directory can be copied anywhere, served by any static server or opened
// from disk.

// ErrPublishUsage marks a publish error the user fixes by changing the
// command line: a directory that does not exist or holds no runs, or an
// output directory that is not a site.
var ErrPublishUsage = errors.New("publish")

// PublishOptions say what to publish where.
type PublishOptions struct {
	// Dirs are searched recursively for run directories (a directory
	// holding result.json or conform.json).
	Dirs []string
	// Out receives the site. It must be new, empty, or a site an earlier
	// publish wrote (whose pages are then replaced).
	Out string
	// Now is the time the index says it was published (default: now).
	Now time.Time
	// Threshold is the smallest relative change a trend marks as a
	// change point (0: TrendThreshold). A machine whose runs drift by
	// more than the default between unchanged runs wants a larger one.
	Threshold float64
}

// Published says what Publish wrote.
type Published struct {
	Index      string
	Benchmarks int      // runs with result.json
	Conforms   int      // runs with conform.json
	Trends     []string // trend pages, relative to the site
	// Skipped lists files that looked like results but could not be read
	// (broken JSON, another schema version), each with the reason.
	Skipped []string
}

// siteMarker is the file that tells a directory is a site Publish wrote,
// so a later publish may replace its pages and never touches anything else.
const siteMarker = ".inboxbench-site"

// runFiles are copied from a run directory into the site when present.
var runFiles = []string{results.ResultFile, results.ConformFile, "report.html", "report.md", "cells.csv", "series.csv"}

// siteRun is one run directory found under the published directories.
type siteRun struct {
	Src     string // where it was found
	ID      string // its directory under runs/ (the run id, made unique and safe)
	Run     *results.Run
	Conform *results.Conformance
}

// Started is the run's start time (the conformance run's when the
// directory holds only conform.json).
func (r *siteRun) Started() time.Time {
	if r.Run != nil {
		return r.Run.StartedAt
	}
	return r.Conform.StartedAt
}

func (r *siteRun) env() results.Env {
	if r.Run != nil {
		return r.Run.Env
	}
	return r.Conform.Env
}

// Publish finds every run under opt.Dirs and writes the site into opt.Out.
func Publish(opt PublishOptions) (*Published, error) {
	if len(opt.Dirs) == 0 {
		return nil, fmt.Errorf("%w: name at least one results directory", ErrPublishUsage)
	}
	if opt.Now.IsZero() {
		opt.Now = time.Now()
	}
	runs, skipped, err := findRuns(opt.Dirs, opt.Out)
	if err != nil {
		return nil, err
	}
	if err := prepareSite(opt.Out); err != nil {
		return nil, err
	}
	pub := &Published{Index: filepath.Join(opt.Out, "index.html"), Skipped: skipped}
	for _, r := range runs {
		if r.Run != nil {
			pub.Benchmarks++
		}
		if r.Conform != nil {
			pub.Conforms++
		}
		if err := writeRunFiles(opt.Out, r); err != nil {
			return nil, err
		}
	}
	threshold := opt.Threshold
	if threshold <= 0 {
		threshold = TrendThreshold
	}
	trends := buildTrends(runs, threshold)
	for _, tr := range trends {
		view, err := newTrendView(tr)
		if err != nil {
			return nil, err
		}
		if err := writePage(filepath.Join(opt.Out, tr.Path()), "trend", view); err != nil {
			return nil, err
		}
		pub.Trends = append(pub.Trends, tr.Path())
	}
	if err := writePage(pub.Index, "index", newIndexView(runs, trends, skipped, opt.Now)); err != nil {
		return nil, err
	}
	if err := copySchemas(opt.Out); err != nil {
		return nil, err
	}
	return pub, os.WriteFile(filepath.Join(opt.Out, siteMarker), []byte("written by bench publish; a later publish replaces this directory's pages\n"), 0o644)
}

// findRuns walks each directory for run directories. A directory that
// does not exist, or holds no run, is refused: publishing nothing from a
// mistyped path must not look like success.
func findRuns(dirs []string, out string) ([]*siteRun, []string, error) {
	outAbs, _ := filepath.Abs(out)
	var runs []*siteRun
	var skipped []string
	for _, dir := range dirs {
		st, err := os.Stat(dir)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: results directory %s: %v", ErrPublishUsage, dir, err)
		}
		if !st.IsDir() {
			return nil, nil, fmt.Errorf("%w: %s is not a directory: pass the directory that holds the run directories (e.g. results)", ErrPublishUsage, dir)
		}
		if abs, _ := filepath.Abs(dir); abs == outAbs {
			return nil, nil, fmt.Errorf("%w: %w", ErrPublishUsage, config.Invalid(KeyOut, out, "is the results directory itself: write the site somewhere else (e.g. site)"))
		}
		found, skip, err := walkRuns(dir, outAbs)
		if err != nil {
			return nil, nil, err
		}
		skipped = append(skipped, skip...)
		if len(found) == 0 {
			msg := fmt.Sprintf("%s holds no runs: no result.json or %s in it or below it; write some with 'bench run' or 'bench conform' (both write into results/ unless told otherwise)",
				dir, results.ConformFile)
			if len(skip) > 0 {
				msg += "; unreadable: " + strings.Join(skip, "; ")
			}
			return nil, nil, fmt.Errorf("%w: %s", ErrPublishUsage, msg)
		}
		runs = append(runs, found...)
	}
	// Newest first, as the index lists them; the run id breaks ties.
	sort.SliceStable(runs, func(i, j int) bool {
		a, b := runs[i].Started(), runs[j].Started()
		if !a.Equal(b) {
			return a.After(b)
		}
		return runs[i].Src < runs[j].Src
	})
	assignIDs(runs)
	return runs, skipped, nil
}

func walkRuns(root, outAbs string) (found []*siteRun, skipped []string, err error) {
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if abs, _ := filepath.Abs(path); abs == outAbs || (path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata")) || exists(filepath.Join(path, siteMarker)) {
			return filepath.SkipDir // the site being written, an earlier site (its copies of runs), .git, Go test fixtures (testdata) and the like
		}
		if !exists(filepath.Join(path, results.ResultFile)) && !exists(filepath.Join(path, results.ConformFile)) {
			return nil
		}
		rep, err := results.Load(path)
		if err != nil {
			skipped = append(skipped, err.Error())
			return filepath.SkipDir
		}
		found = append(found, &siteRun{Src: path, Run: rep.Run, Conform: rep.Conform})
		return filepath.SkipDir // a run directory holds no further runs
	})
	if err != nil {
		return nil, nil, fmt.Errorf("%w: searching %s: %v", ErrPublishUsage, root, err)
	}
	return found, skipped, nil
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// safeName turns a run id or workload name into one path segment that
// needs no escaping in a URL and cannot climb out of its directory.
func safeName(s string) string {
	s = strings.Trim(unsafeName.ReplaceAllString(s, "-"), "-.")
	if s == "" {
		return "run"
	}
	return s
}

// assignIDs names each run's site directory after its run id; runs copied
// from several machines may share one (a fixed --run-id), so later ones
// get a suffix.
func assignIDs(runs []*siteRun) {
	seen := map[string]int{}
	for i := len(runs) - 1; i >= 0; i-- { // oldest keeps the plain name
		r := runs[i]
		id := r.Src
		if r.Run != nil && r.Run.RunID != "" {
			id = r.Run.RunID
		} else if r.Conform != nil && r.Conform.RunID != "" {
			id = r.Conform.RunID
		}
		id = safeName(id)
		seen[id]++
		if n := seen[id]; n > 1 {
			id = fmt.Sprintf("%s-%d", id, n)
		}
		r.ID = id
	}
}

// KeyOut is the setting key of the site's directory (Publish's out).
const KeyOut = "publish.out"

// prepareSite makes out ready: created when missing; an earlier site's
// pages removed; anything else refused rather than mixed into.
func prepareSite(out string) error {
	if out == "" {
		return fmt.Errorf("%w: %w", ErrPublishUsage, config.Invalid(KeyOut, nil, "empty: name the directory for the site"))
	}
	entries, err := os.ReadDir(out)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return os.MkdirAll(out, 0o755)
	case err != nil:
		return fmt.Errorf("%w: %w", ErrPublishUsage, config.Invalid(KeyOut, out, "%v", err))
	case len(entries) == 0:
		return nil
	case !exists(filepath.Join(out, siteMarker)):
		return fmt.Errorf("%w: %w", ErrPublishUsage, config.Invalid(KeyOut, out, "is not empty and is not a site bench publish wrote: choose a new or empty directory"))
	}
	for _, name := range []string{"index.html", "runs", "trends", "schema"} {
		if err := os.RemoveAll(filepath.Join(out, name)); err != nil {
			return fmt.Errorf("replace the earlier site in %s: %w", out, err)
		}
	}
	return nil
}

// writeRunFiles copies the run's files into runs/ID and renders
// report.html there when the run directory has none: the source directory
// is never written to.
func writeRunFiles(out string, r *siteRun) error {
	dst := filepath.Join(out, "runs", r.ID)
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	for _, name := range runFiles {
		b, err := os.ReadFile(filepath.Join(r.Src, name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, name), b, 0o644); err != nil {
			return err
		}
	}
	if exists(filepath.Join(dst, "report.html")) {
		return nil
	}
	_, err := WriteFiles(dst, &results.Report{Dir: r.Src, Run: r.Run, Conform: r.Conform}, []Output{{"report.html", HTML}})
	return err
}

func copySchemas(out string) error {
	dir := filepath.Join(out, "schema")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, name := range schema.Names {
		b, err := schema.Files.ReadFile(name)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// writePage renders one of the site's templates fully in memory, then
// writes it.
func writePage(path, name string, view any) error {
	var buf bytes.Buffer
	if err := siteTmpl.ExecuteTemplate(&buf, name, view); err != nil {
		return fmt.Errorf("render %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}
