package rabbitmq_test

import (
	"context"
	"strings"
	"testing"

	"github.com/inboxbench/inboxbench/brokers/rabbitmq"
	"github.com/inboxbench/inboxbench/config"
)

// TestBadURLNeverComesBackWithItsPassword: a URL that does not parse (a
// '%' in the password not followed by two hex digits, a space) is refused
// with a message that says what to do and holds neither the password nor
// a piece of it; amqp091 would quote net/url's error, URL and all.
func TestBadURLNeverComesBackWithItsPassword(t *testing.T) {
	for _, raw := range []string{"amqp://u:Pw%Secret-1@127.0.0.1:1/v", "amqps://u:Pw Secret-1@127.0.0.1:1/v", "amqp://u:Pw-Secret-1@[::1/v"} {
		cfg := config.Default().With(rabbitmq.SettingURL, raw)
		b, err := rabbitmq.New(context.Background(), cfg, nil)
		if err == nil {
			err = b.Setup(context.Background(), "t", 1)
			b.Close()
		}
		if err == nil {
			t.Fatalf("%s: accepted", raw)
		}
		if strings.Contains(err.Error(), "Secret") || strings.Contains(err.Error(), "%Se") {
			t.Errorf("%s: the error shows the password: %v", raw, err)
		}
		if !strings.Contains(err.Error(), rabbitmq.SettingURL) {
			t.Errorf("%s: the error does not name the setting: %v", raw, err)
		}
	}
	if got := rabbitmq.Addr("amqps://u:p@rabbit.example/v"); got != "rabbit.example:5671" {
		t.Errorf("amqps without a port: %s, want port 5671", got)
	}
}
