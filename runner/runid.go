package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/inbox"
	"github.com/inboxbench/inboxbench/results"
)

// A run id names a new run: its results directory, its cells' schemas,
// topics and consumer groups all derive from it. Reusing one would judge a
// cell on the old run's rows (every event a duplicate) and consume the
// old topics, so a run id that was used is refused unless the run is told
// to replace what exists.

// ErrRunExists marks a run id whose results or schemas already exist.
var ErrRunExists = errors.New("run id already used")

var runIDChars = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

func validRunID(id string) error {
	if !runIDChars.MatchString(id) || len(id) > 100 {
		return config.Invalid(KeyRunID, id, "use up to 100 letters, digits, '.', '_' or '-' (it names a directory, schemas and topics)")
	}
	return nil
}

// leftovers lists what a previous run with o.RunID left: its results
// directory and its cells' schemas.
func leftovers(ctx context.Context, o *Options, db inbox.DB) (dir string, schemas []string, err error) {
	if !o.Output.NoWrite {
		d := filepath.Join(o.Output.Dir, o.RunID)
		if _, err := os.Stat(d); err == nil {
			dir = d
		}
	}
	prefix := identPrefix("ib_" + o.RunID + "_")
	rows, err := db.Query(ctx, "SELECT nspname FROM pg_namespace WHERE left(nspname, length($1)) = $1 ORDER BY nspname", prefix)
	if err != nil {
		return "", nil, fmt.Errorf("postgres: look for schemas of run %s: %w", o.RunID, err)
	}
	schemas, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", nil, fmt.Errorf("postgres: look for schemas of run %s: %w", o.RunID, err)
	}
	return dir, schemas, nil
}

// identPrefix is what the ids of cells (cellID) that start with p start
// with: a long id keeps its first 51 bytes.
func identPrefix(p string) string {
	p = unsafeIdent.ReplaceAllString(strings.ToLower(p), "_")
	return p[:min(len(p), 51)]
}

// claimRunID refuses a run id that was used, or with o.Replace drops what
// the earlier run left: its schemas, its cells' topics, its results
// directory and its worker control rows.
func claimRunID(ctx context.Context, o *Options, db inbox.DB) error {
	dir, schemas, err := leftovers(ctx, o, db)
	if err != nil {
		return err
	}
	if dir == "" && len(schemas) == 0 {
		return nil
	}
	if !o.Replace {
		var what []string
		if dir != "" {
			what = append(what, "the results directory "+dir)
		}
		if len(schemas) > 0 {
			what = append(what, fmt.Sprintf("%d schema(s) %s", len(schemas), strings.Join(schemas[:min(3, len(schemas))], ", ")))
		}
		return &config.SettingError{Key: KeyRunID, Value: o.RunID, Err: fmt.Errorf("%w: %s exist; choose another, or set %s to drop them first",
			ErrRunExists, strings.Join(what, " and "), KeyReplace)}
	}
	for _, s := range schemas {
		if err := inbox.DropSchema(ctx, db, s); err != nil {
			return fmt.Errorf("replace run %s: %w", o.RunID, err)
		}
	}
	// A cell's topic is named after its schema, which names its round; a
	// cell that failed before creating its schema may still have a topic
	// under its plain id.
	byBroker := map[string][]string{}
	for _, b := range o.Brokers {
		for _, s := range cellStrategies(*o) {
			byBroker[b] = append(byBroker[b], cellID(o.RunID, b, s))
		}
		mine := identPrefix("ib_" + o.RunID + "_" + b + "_")
		for _, s := range schemas {
			if strings.HasPrefix(s, mine) {
				byBroker[b] = append(byBroker[b], s)
			}
		}
		// A one-round cell's schema is its plain id: delete it once.
		slices.Sort(byBroker[b])
		byBroker[b] = slices.Compact(byBroker[b])
	}
	if err := deleteTopics(ctx, o, byBroker); err != nil {
		return fmt.Errorf("replace run %s: %w", o.RunID, err)
	}
	if err := forgetRun(ctx, db, o.RunID); err != nil {
		return fmt.Errorf("replace run %s: postgres: forget its worker control rows: %w", o.RunID, err)
	}
	if dir != "" {
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("replace run %s: %w", o.RunID, err)
		}
	}
	fmt.Fprintf(o.Console.Progress, "run %s: replaced what an earlier run of this id left (%d schema(s)%s)\n", o.RunID, len(schemas), map[bool]string{true: ", " + dir}[dir != ""])
	return nil
}

// deleteTopics removes the topics of the given cell ids (and their
// dead-letter destinations), broker by broker, from every driver that can.
func deleteTopics(ctx context.Context, o *Options, byBroker map[string][]string) error {
	for _, b := range o.Brokers {
		if len(byBroker[b]) == 0 {
			continue
		}
		br, err := brokers.Open(ctx, b, o.Cfg, nil)
		if err != nil {
			return fmt.Errorf("%s: %w", b, err)
		}
		if d, ok := br.(brokers.TopicDeleter); ok {
			for _, id := range byBroker[b] {
				if err := d.DeleteTopic(ctx, topicOf(id)); err != nil {
					br.Close()
					return fmt.Errorf("%s: delete topic %s: %w", b, topicOf(id), err)
				}
			}
		}
		br.Close()
	}
	return nil
}

// forgetPassed drops the schemas and topics of the rounds that passed,
// warm-up rounds included, once the run's result is written: their rows
// proved what they had to, and kept, a make bench's 16-18 GB added up run
// after run until the disk filled and a broker deleted unread data. The
// cells that did not pass keep theirs, for reading. Runs that write no
// result (conform's scenarios, calibrate-db's cells) clean up their own.
// It returns how many rounds it dropped.
func forgetPassed(ctx context.Context, o *Options, passed []results.Cell) (int, error) {
	if o.KeepData || o.Output.NoWrite || len(passed) == 0 {
		return 0, nil
	}
	// A broker that went away during the run must not hold the run's end.
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, o.Cfg.PGURL)
	if err != nil {
		return 0, fmt.Errorf("postgres: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	byBroker := map[string][]string{}
	for _, c := range passed {
		if err := inbox.DropSchema(ctx, conn, c.Schema); err != nil {
			return 0, err
		}
		byBroker[c.Broker] = append(byBroker[c.Broker], c.Schema)
	}
	return len(passed), deleteTopics(ctx, o, byBroker)
}

// forgetRun removes a run's worker control rows, if there are any.
func forgetRun(ctx context.Context, db inbox.DB, runID string) error {
	var exists bool
	if err := db.QueryRow(ctx, "SELECT to_regclass('inboxbench_runs.run') IS NOT NULL").Scan(&exists); err != nil || !exists {
		return err
	}
	_, err := db.Exec(ctx, "DELETE FROM inboxbench_runs.run WHERE run_id = $1", runID)
	return err
}
