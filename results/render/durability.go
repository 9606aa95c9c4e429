package render

import (
	"fmt"
	"strings"

	"github.com/inboxbench/inboxbench/results"
)

// durabilityVerdictKey is the key every durability report fills in with
// its one-line verdict (brokers.FsyncKey; results does not import brokers).
const durabilityVerdictKey = "fsync before confirm"

// replicationVerdictKey is the replication verdict beside it
// (brokers.ReplicatedKey), where the service reports one.
const replicationVerdictKey = "replicated before confirm"

// durabilityRows is the durability table: one row per service (PostgreSQL
// first, then the brokers by name) with its verdict and its settings as
// key=value pairs, so unlike settings stand side by side.
func durabilityRows(e results.Env) [][]string {
	if e.Durability == nil {
		return nil
	}
	settings := e.Durability.Settings
	var services []string
	if _, ok := settings[results.DurabilityPostgres]; ok {
		services = append(services, results.DurabilityPostgres)
	}
	for _, s := range sortedKeys(settings) {
		if s != results.DurabilityPostgres {
			services = append(services, s)
		}
	}
	var rows [][]string
	for _, s := range services {
		m := settings[s]
		var settings []string
		for _, k := range sortedKeys(m) {
			if k != durabilityVerdictKey && k != replicationVerdictKey {
				settings = append(settings, fmt.Sprintf("%s=%s", k, m[k]))
			}
		}
		rows = append(rows, []string{s, dashIfEmpty(m[durabilityVerdictKey]), dashIfEmpty(m[replicationVerdictKey]), strings.Join(settings, "; ")})
	}
	return rows
}

var durabilityHeader = []string{"service", "fsync before confirm / commit", "replicated before confirm / commit", "settings (read from the server where it tells)"}

func dashIfEmpty(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func durabilityIntro(e results.Env) string {
	t := "What a broker's confirm and a PostgreSQL commit meant in this run: a figure measured without an fsync, or without a copy on another node, before the confirm is not comparable with one measured with it."
	if e.Durability != nil && e.Durability.Profile != "" {
		t += fmt.Sprintf(" Stack durability profile: %s (bench stack up --durability).", e.Durability.Profile)
	}
	return t
}

// durabilityView is the HTML section.
type durabilityView struct {
	Intro  string
	Header []string
	Rows   [][]string
}

func (m *mdWriter) durability(e results.Env) {
	if e.Durability == nil || len(e.Durability.Settings) == 0 {
		return
	}
	m.p("## Durability\n\n%s\n\n", durabilityIntro(e))
	m.table(durabilityHeader, "llll", durabilityRows(e))
}
