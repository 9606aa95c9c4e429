package runner

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/inbox"
	"github.com/inboxbench/inboxbench/workload"
)

func TestOptionsValidate(t *testing.T) {
	spec := workload.Defaults()
	ok := func() Options {
		return Options{Spec: &spec, Brokers: []string{"none"}, Strategies: []string{"tx"}}
	}
	for _, tc := range []struct {
		name string
		edit func(*Options)
		want string // "" when valid
	}{
		{"valid", func(*Options) {}, ""},
		{"no workload", func(o *Options) { o.Spec = nil }, "no workload"},
		{"no broker", func(o *Options) { o.Brokers = nil }, "no broker"},
		{"no strategy", func(o *Options) { o.Strategies = nil }, "no strategy"},
		{"unknown strategy", func(o *Options) { o.Strategies = []string{"txx"} }, `unknown strategy "txx"`},
		{"negative workers", func(o *Options) { o.Workers.Local = -1 }, KeyWorkersLocal + " -1"},
		{"workers without a command", func(o *Options) { o.Workers.Local = 2 }, "Workers.Cmd"},
		{"partition interval not whole minutes", func(o *Options) {
			o.Inbox = inbox.Layout{Partitioned: true, Interval: 90 * time.Second}
		}, KeyPartitionInterval + ": inbox: partition interval 1m30s"},
		{"run id with a space", func(o *Options) { o.RunID = "a b" }, KeyRunID + ` "a b": use up to 100`},
		{"rate search with worker processes", func(o *Options) {
			o.Search, o.Workers = &RateSearch{}, Workers{Local: 1, Cmd: []string{"bench", "worker"}}
		}, KeySearch + ": the rate search runs its steps with in-process consumers, no backlog and no mid-stream faults: unset " + KeyWorkersLocal},
		{"fraction above 1", func(o *Options) { o.Search = &RateSearch{Fractions: []float64{1.5}} }, KeySearchFractions + " 1.5"},
		{"partitioned with the default interval", func(o *Options) { o.Inbox = inbox.Layout{Partitioned: true} }, ""},
		{"an external strategy", func(o *Options) { o.Strategies = []string{"tx", "ext-lease"} }, ""},
		{"an external strategy on a reordered stream", func(o *Options) {
			s := *o.Spec
			s.Faults.OutOfOrder = 0.1
			o.Spec, o.Strategies = &s, []string{"ext-key"}
		}, "strategy ext-key calls an external service and neither parks"},
		{"an external strategy in a rate search", func(o *Options) {
			o.Search, o.Strategies = &RateSearch{}, []string{"ext-outbox"}
		}, KeySearch + ": ext-outbox calls an external service, and the rate search does not judge external calls"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := ok()
			tc.edit(&o)
			err := o.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one naming %q", err, tc.want)
			}
			// An option's error names it by its key, for the program to
			// name as its user gave it.
			var se *config.SettingError
			if strings.HasPrefix(tc.want, "runner.") && (!errors.As(err, &se) || !strings.HasPrefix(tc.want, se.Key)) {
				t.Fatalf("error %v is not a setting error for %q", err, tc.want)
			}
		})
	}
	o := ok()
	if err := o.Validate(); err != nil || o.RunID == "" || o.Limits.Stall != 30*time.Second || o.Console.Log == nil || o.Console.Progress == nil {
		t.Fatalf("defaults not filled: %+v (%v)", o, err)
	}
	// The workload's rounds are for cells of one stream; a rate search
	// runs once unless asked for more.
	spec5 := spec
	spec5.Rounds = 5
	for _, tc := range []struct {
		search      *RateSearch
		asked, want int
	}{{nil, 0, 5}, {&RateSearch{}, 0, 1}, {&RateSearch{}, 2, 2}, {nil, 3, 3}} {
		o := Options{Spec: &spec5, Brokers: []string{"none"}, Strategies: []string{"tx"}, Search: tc.search, Rounds: tc.asked}
		if err := o.Validate(); err != nil || o.Rounds != tc.want {
			t.Fatalf("search %v, --rounds %d: %d rounds (%v), want %d", tc.search != nil, tc.asked, o.Rounds, err, tc.want)
		}
	}
}
