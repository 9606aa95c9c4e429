package runner

import (
	"strings"
	"testing"
	"time"

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
		{"negative workers", func(o *Options) { o.Workers.Local = -1 }, "--workers"},
		{"workers without a command", func(o *Options) { o.Workers.Local = 2 }, "Workers.Cmd"},
		{"partition interval not whole minutes", func(o *Options) {
			o.Inbox = inbox.Layout{Partitioned: true, Interval: 90 * time.Second}
		}, "--partition-interval"},
		{"partitioned with the default interval", func(o *Options) { o.Inbox = inbox.Layout{Partitioned: true} }, ""},
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
		})
	}
	o := ok()
	if err := o.Validate(); err != nil || o.RunID == "" || o.Limits.Stall != 30*time.Second || o.Console.Log == nil || o.Console.Progress == nil {
		t.Fatalf("defaults not filled: %+v (%v)", o, err)
	}
}
