package nats

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/brokers/internal/driverutil"
	"github.com/inboxbench/inboxbench/config"
)

// DefaultURL is the local stack's nats-server (a port contract of `bench
// stack` and compose/docker-compose.yml).
const DefaultURL = "nats://127.0.0.1:54222"

// Defaults of the consumer settings.
const (
	DefaultAckWait    = 5 * time.Second
	DefaultMaxDeliver = 20
	DefaultPinnedTTL  = 5 * time.Second
)

// SettingDuplicateWindow is the streams' Duplicates window: the setting
// every driver with broker-side deduplication reads.
var SettingDuplicateWindow = brokers.SettingDedupWindow

// The driver's settings (flags, INBOXBENCH_NATS_* variables).
var (
	SettingURL = driverutil.Setting(Name, "url", config.Setting{Default: DefaultURL, Check: checkURL,
		Usage: "NATS server URL (nats://host:port, credentials in the URL when the server asks for them); JetStream must be enabled"})
	SettingAckWait = driverutil.Setting(Name, "ack-wait", config.Setting{Default: DefaultAckWait.String(), Check: checkDuration,
		Usage: "JetStream AckWait of the driver's consumers: a delivery not acknowledged (nor marked in progress) for this long is delivered again; it bounds how long a crashed consumer's deliveries wait"})
	SettingMaxDeliver = driverutil.Setting(Name, "max-deliver", config.Setting{Default: fmt.Sprint(DefaultMaxDeliver), Check: checkPositive,
		Usage: "JetStream MaxDeliver of the driver's consumers: a message delivered this often without a verdict (its consumers crashed each time) is moved to the dead-letter stream instead of being handed over again"})
	SettingPinnedTTL = driverutil.Setting(Name, "pinned-ttl", config.Setting{Default: DefaultPinnedTTL.String(), Check: checkDuration,
		Usage: "priority-group PinnedTTL of the driver's consumers: how long a partition stays pinned to a subscription that stopped pulling (crashed) before another takes it over"})
)

func checkURL(v string) error {
	for _, one := range strings.Split(v, ",") {
		u, err := url.Parse(strings.TrimSpace(one))
		if err != nil {
			return fmt.Errorf("not a URL: want nats://host:port")
		}
		if u.Scheme != "nats" && u.Scheme != "tls" {
			return fmt.Errorf("scheme %q: want nats:// (or tls://)", u.Scheme)
		}
		if _, _, err := net.SplitHostPort(u.Host); err != nil {
			return fmt.Errorf("want nats://host:port: %v", err)
		}
	}
	return nil
}

func checkDuration(v string) error {
	if d, err := time.ParseDuration(v); err != nil || d <= 0 {
		return fmt.Errorf("want a positive Go duration such as 5s")
	}
	return nil
}

func checkPositive(v string) error {
	var n int
	if _, err := fmt.Sscan(v, &n); err != nil || n < 1 {
		return fmt.Errorf("want a positive number")
	}
	return nil
}

// Addr is the host:port of the first URL of a nats.url value ("" when it
// does not parse).
func Addr(raw string) string {
	u, err := url.Parse(strings.TrimSpace(strings.Split(raw, ",")[0]))
	if err != nil {
		return ""
	}
	return u.Host
}

// duration reads a duration setting that Check accepted, def when empty.
func duration(cfg config.Config, key string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(cfg.Get(key)); err == nil && d > 0 {
		return d
	}
	return def
}
