package compose

import (
	"strings"
	"testing"

	"github.com/inboxbench/inboxbench/config"
)

// profiled is a service whose configuration is settings' under each
// profile (DurabilityAware); a nil settings is a service whose
// configuration no profile changes.
type profiled struct {
	fakeService
	settings map[string]string
}

// DurabilitySettings implements DurabilityAware.
func (p *profiled) DurabilitySettings(profile string) string { return p.settings[profile] }

// A service started under one profile is restarted for another only when
// its settings differ; without --durability nothing restarts, and a new
// service starts with the recorded profile, else stock.
func TestDurabilityRestartDecision(t *testing.T) {
	e := &Env{Dir: t.TempDir(), Cfg: config.Default()}
	// As Kafka, RabbitMQ and PostgreSQL are (each package tests its own
	// settings).
	k := &profiled{fakeService{name: "kafka"}, map[string]string{DurabilityFsync: "log.flush.interval.messages=1"}}
	r := &fakeService{name: "rabbitmq"}
	pg := &profiled{fakeService{name: "postgres"}, map[string]string{DurabilityStock: "on", DurabilityFsync: "on", DurabilityOS: "off"}}
	if p := StartProfile(e, k); p != DurabilityStock {
		t.Errorf("nothing recorded, no flag: start profile %q, want stock", p)
	}
	if _, restart := needsRestart(e, k); restart {
		t.Error("no --durability: a restart was asked for")
	}
	e.Durability = DurabilityFsync
	if from, restart := needsRestart(e, k); !restart || from != DurabilityStock {
		t.Errorf("kafka stock → fsync: restart=%v from %q, want a restart from stock", restart, from)
	}
	if _, restart := needsRestart(e, r); restart {
		t.Error("rabbitmq runs the same configuration under every profile, yet a restart was asked for")
	}
	if _, restart := needsRestart(e, pg); restart {
		t.Error("postgres runs the same settings under stock and fsync, yet a restart was asked for")
	}
	if got := RecordedDurability(e, r); got != DurabilityFsync {
		t.Errorf("rabbitmq's profile not recorded as fsync without a restart: %q", got)
	}
	if err := recordDurability(e, k, DurabilityFsync); err != nil {
		t.Fatal(err)
	}
	if _, restart := needsRestart(e, k); restart {
		t.Error("kafka already runs fsync: a restart was asked for")
	}
	e.Durability = ""
	if p := StartProfile(e, k); p != DurabilityFsync {
		t.Errorf("no flag: kafka would start with %q, want its recorded fsync", p)
	}
	if err := CheckDurability("sync"); err == nil || !strings.Contains(err.Error(), "stock, fsync, os") {
		t.Errorf("CheckDurability(sync) = %v, want the profiles named", err)
	}
	rocketmq := &fakeService{name: "rocketmq"}
	if got := stackDurability(e, []Service{pg, r, k, rocketmq}); !strings.HasPrefix(got, "mixed (") {
		t.Errorf("StackDurability with kafka and rabbitmq at fsync, the others unrecorded = %q, want mixed", got)
	}
}
