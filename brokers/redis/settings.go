package redis

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/inboxbench/inboxbench/brokers/internal/driverutil"
	"github.com/inboxbench/inboxbench/config"
)

// DefaultURL is the local stack's Redis: port 56379 is a contract of
// `bench stack` (compose/redis) and compose/docker-compose.yml.
const DefaultURL = "redis://127.0.0.1:56379/0"

// SettingURL is the server the driver talks to (flag --redis-url,
// INBOXBENCH_REDIS_URL).
var SettingURL = driverutil.Setting(Name, "url", config.Setting{Default: DefaultURL, Check: checkURL,
	Usage: "Redis URL: redis://[user:password@]host:port/db, or rediss:// for TLS"})

func init() {
	config.RegisterCheck(plaintextRule)
	// go-redis logs a failed dial to stderr on its own, in the middle of
	// bench's progress lines; the driver returns every error itself.
	goredis.SetLogger(quiet{})
}

// quiet is a go-redis logger that prints nothing.
type quiet struct{}

// Printf implements go-redis's internal.Logging.
func (quiet) Printf(context.Context, string, ...any) {}

// checkURL accepts what go-redis parses, with a redis:// or rediss://
// scheme; its error never holds the URL (nor its password).
func checkURL(v string) error {
	if !strings.HasPrefix(v, "redis://") && !strings.HasPrefix(v, "rediss://") {
		return errors.New("must start with redis:// or rediss:// (TLS)")
	}
	if _, err := goredis.ParseURL(v); err != nil {
		return errors.New("not a valid Redis URL: redis://[user:password@]host:port/db (percent-encode reserved characters of the password)")
	}
	return nil
}

// plaintextRule refuses a password that AUTH would send in clear: a
// redis:// URL (no TLS) with a password, to a host other than this one,
// unless the user allowed it.
func plaintextRule(c config.Config) error {
	raw := c.Get(SettingURL)
	o, err := goredis.ParseURL(raw)
	if err != nil || o.Password == "" || o.TLSConfig != nil || c.PlaintextPasswordAllowed([]string{o.Addr}) {
		return nil
	}
	return config.Invalid(SettingURL, nil, "a redis:// URL sends its password in clear (AUTH without TLS) to %s: use rediss://, or allow it with %s", o.Addr, config.SettingAllowPlaintextPasswords)
}

// Addr is the host:port the URL reaches; "" when it does not parse.
func Addr(raw string) string {
	o, err := goredis.ParseURL(raw)
	if err != nil {
		return ""
	}
	return o.Addr
}

// clientOptions are the go-redis options of a client of cfg's server
// with a pool of poolSize connections. The client does not retry: a
// command that failed may have run (an XADD twice, an XREADGROUP whose
// entries then wait in the consumer's pending list), and the driver
// recovers from that itself.
func clientOptions(cfg config.Config, poolSize int) (*goredis.Options, error) {
	o, err := goredis.ParseURL(cfg.Get(SettingURL))
	if err != nil {
		return nil, config.Invalid(SettingURL, nil, "%v", checkURL(cfg.Get(SettingURL)))
	}
	o.MaxRetries = -1
	o.PoolSize = poolSize
	o.DialTimeout = 5 * time.Second
	o.DialerRetries = 1 // a server that refuses is down: the caller waits and tries again
	o.ReadTimeout = 10 * time.Second
	o.WriteTimeout = 10 * time.Second
	// Redis 7.0 knows neither CLIENT SETINFO (7.2) nor maintenance
	// notifications (a managed-service extension): don't ask.
	o.DisableIdentity = true
	o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	return o, nil
}

// Version connects with cfg, sends PING and returns the server's version
// from INFO server ("Redis 7.0.15"): the stack's readiness check. A
// server still loading its append-only file answers LOADING.
func Version(ctx context.Context, cfg config.Config) (string, error) {
	o, err := clientOptions(cfg, 1)
	if err != nil {
		return "", err
	}
	c := goredis.NewClient(o)
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil {
		return "", explain(cfg, err)
	}
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return "", explain(cfg, err)
	}
	return "Redis " + infoField(info, "redis_version"), nil
}

// infoField reads one field of an INFO reply ("name:value" lines).
func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return "(" + name + " not in INFO)"
}

// explain names the URL setting when the server refused its credentials.
func explain(cfg config.Config, err error) error {
	msg := err.Error()
	if strings.Contains(msg, "WRONGPASS") || strings.Contains(msg, "NOAUTH") || strings.Contains(msg, "NOPERM") {
		return config.Invalid(SettingURL, nil, "the server refused the URL's credentials: %v", err)
	}
	return fmt.Errorf("redis at %s: %w", Addr(cfg.Get(SettingURL)), err)
}

// withHost returns raw with its host and port replaced by addr.
func withHost(raw, addr string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", errors.New("redis: the URL does not parse")
	}
	u.Host = addr
	return u.String(), nil
}
