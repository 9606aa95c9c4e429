package compose

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"testing"

	rabbitmqbroker "github.com/inboxbench/inboxbench/brokers/rabbitmq"
	"github.com/inboxbench/inboxbench/config"
)

// TestRabbitMQAddrDefaultsByScheme: an amqps:// URL without a port is
// checked at 5671, where the driver connects, not at 5672.
func TestRabbitMQAddrDefaultsByScheme(t *testing.T) {
	for raw, want := range map[string]string{
		"amqps://u:p@rabbit.example/v": "rabbit.example:5671",
		"amqp://u:p@rabbit.example/v":  "rabbit.example:5672",
		"amqps://rabbit.example:7000/": "rabbit.example:7000",
	} {
		e := &Env{Cfg: config.Default().With(rabbitmqbroker.SettingURL, raw)}
		if got := (&RabbitMQ{}).Addr(e); got != want {
			t.Errorf("%s: checked at %s, want %s", raw, got, want)
		}
	}
}

// TestStatusNeverShowsAPassword: endpoints that do not parse (an
// unescaped '%' in the RabbitMQ password, a PostgreSQL URL with two
// ports) show up in `bench stack status` without their passwords, neither
// in the address nor in the error a client library returned.
func TestStatusNeverShowsAPassword(t *testing.T) {
	cfg := config.Default().With(rabbitmqbroker.SettingURL, "amqp://u:Pw-Secret-1%zz@127.0.0.1:1/v")
	cfg.PGURL = "postgres://u:Pw-Secret-2@127.0.0.1:1:2/db"
	e := &Env{Dir: t.TempDir(), Cfg: cfg, Out: io.Discard}
	for _, r := range Status(context.Background(), e, []Service{&RabbitMQ{}, &Postgres{}}) {
		text := fmt.Sprintf("%s %s %s", r.Address, r.Detail, r.Version)
		if r.Healthy || strings.Contains(text, "Secret") || strings.Contains(text, "%zz") {
			t.Errorf("%s: healthy %v, shown %q", r.Service, r.Healthy, text)
		}
	}
}

// TestCommandLineMasksCredentials: what the stack logs of a command it
// ran (RunLogged, a process's start) holds no password, in the forms its
// setup commands take them.
func TestCommandLineMasksCredentials(t *testing.T) {
	cmd := exec.Command("java", "kafka.tools.StorageTool", "format", "--add-scram", "SCRAM-SHA-512=[name=admin,password=Pw-Secret-1]",
		"--url", "postgres://u:Pw-Secret-2@127.0.0.1:1/db")
	if got := CommandLine(cmd); strings.Contains(got, "Secret") || !strings.Contains(got, "name=admin") {
		t.Errorf("CommandLine = %s", got)
	}
}

// TestPGPasswordVerifier: the role's password goes to PostgreSQL as its
// SCRAM-SHA-256 verifier (RFC 5803), here against one computed apart
// (Python's hashlib) for a fixed salt.
func TestPGPasswordVerifier(t *testing.T) {
	salt := make([]byte, 16)
	for i := range salt {
		salt[i] = byte(i)
	}
	got, err := scramSHA256("pencil", salt, 4096)
	want := "SCRAM-SHA-256$4096:AAECAwQFBgcICQoLDA0ODw==$zHCdol2044/ZyWzPLi7oxApCkamKw9Z+E4U/QApd/5Y=:dd5peBOitVnLNFu7VmwP+HiDaaw4OUCv396eVCWhYiE="
	if err != nil || got != want {
		t.Errorf("scramSHA256 = %s, %v\nwant %s", got, err, want)
	}
	v, err := pgPasswordVerifier("pencil")
	if err != nil || strings.Contains(v, "pencil") || !strings.HasPrefix(v, "SCRAM-SHA-256$4096:") {
		t.Errorf("pgPasswordVerifier = %s, %v", v, err)
	}
}
