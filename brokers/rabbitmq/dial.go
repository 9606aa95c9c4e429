package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxbench/inboxbench/brokers/internal/driverutil"
	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/internal/tlsfiles"
)

// DialConfig is the amqp091 configuration cfg asks for besides the URL:
// the TLS files (when the URL is amqps:// and any rabbitmq TLS setting is
// given; else amqp091 reads its URL parameters or the system roots), the
// SASL mechanism, and a bound on connecting and the AMQP handshake.
func DialConfig(cfg config.Config, timeout time.Duration) (amqp.Config, error) {
	ac := amqp.Config{Dial: amqp.DefaultDial(timeout), Heartbeat: 10 * time.Second}
	if strings.HasPrefix(cfg.Get(SettingURL), "amqps://") && tlsKeys.Given(cfg) {
		tc, err := tlsfiles.Config(cfg, tlsKeys)
		if err != nil {
			return ac, err
		}
		ac.TLSClientConfig = tc
	}
	if strings.EqualFold(cfg.Get(SettingSASL), SASLExternal) {
		ac.SASL = []amqp.Authentication{&amqp.ExternalAuth{}}
	}
	return ac, nil
}

// TLSFiles are the CA file, client certificate, key and server name an
// amqps:// connection of cfg uses, as DialConfig chooses them: the
// settings when any of them is given, else amqp091's URL parameters
// (cacertfile, certfile, keyfile, server_name_indication). For a program
// that gives RabbitMQ's own tools the same (calibrate).
func TLSFiles(cfg config.Config) (ca, cert, key, serverName string) {
	if tlsKeys.Given(cfg) {
		return cfg.Get(SettingCAFile), cfg.Get(SettingCertFile), cfg.Get(SettingKeyFile), cfg.Get(SettingServerName)
	}
	u, err := ParseURL(cfg.Get(SettingURL))
	if err != nil {
		return "", "", "", ""
	}
	return u.CACertFile, u.CertFile, u.KeyFile, u.ServerName
}

// Dial opens a connection as cfg says, named name on the node (its
// connection_name), within timeout; what the node refuses is explained
// (Explain). With several node URLs it connects to one that answers
// (dialAny), the first first.
func Dial(cfg config.Config, name string, timeout time.Duration) (*amqp.Connection, error) {
	// amqp091 would return a URL that does not parse in its error, with
	// the password; ParseURL's error holds neither.
	if err := checkURL(cfg.Get(SettingURL)); err != nil {
		return nil, config.Invalid(SettingURL, nil, "%v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return dialAny(ctx, cfg, nil, name)
}

// heartbeat is the AMQP heartbeat the driver asks for: a node that stops
// answering (a paused VM, a dead host) is given up after three missed
// heartbeats (15 s), and the driver moves to another node.
const heartbeat = 5 * time.Second

// staggerDial is how long a connection attempt to one node goes
// unanswered before the next node is tried as well.
const staggerDial = time.Second

// dialAny connects to one of cfg's URLs (the nodes of one cluster) as cfg
// says (DialConfig), the one at prefer first (the first when prefer is
// nil): a node that refuses, or has not finished the AMQP handshake
// within staggerDial, is joined by an attempt on the next one, and the
// first connection made wins (the others are closed as they finish). The
// node that answered becomes the preferred one. Each attempt is bounded
// by ctx and dialTimeout; what every node refused is explained (Explain).
func dialAny(ctx context.Context, cfg config.Config, prefer *atomic.Int32, name string) (*amqp.Connection, error) {
	urls := URLs(cfg.Get(SettingURL))
	base, err := DialConfig(cfg, dialTimeout)
	if err != nil {
		return nil, err
	}
	base.Dial = dialer(ctx)
	base.Heartbeat = heartbeat
	base.Properties = amqp.Table{"connection_name": name}
	type result struct {
		conn *amqp.Connection
		i    int
		err  error
	}
	n := len(urls)
	results := make(chan result, n)
	start := 0
	if prefer != nil {
		start = int(prefer.Load()) % n
	}
	launched, finished := 0, 0
	launch := func() {
		i := (start + launched) % n
		launched++
		go func() {
			conn, err := amqp.DialConfig(urls[i], base)
			results <- result{conn, i, err}
		}()
	}
	launch()
	stagger := time.NewTimer(staggerDial)
	defer stagger.Stop()
	var errs []error
	for finished < n {
		select {
		case r := <-results:
			finished++
			if r.err == nil {
				if prefer != nil {
					prefer.Store(int32(r.i))
				}
				go func(left int) { // the slower attempts: close what they open
					for range left {
						if l := <-results; l.err == nil {
							_ = l.conn.Close()
						}
					}
				}(launched - finished)
				return r.conn, nil
			}
			err := Explain(cfg, handshakeErr(r.err))
			if n > 1 {
				err = fmt.Errorf("%s: %w", config.Redact(urls[r.i]), err)
			}
			errs = append(errs, err)
			if launched < n {
				launch()
				stagger.Reset(staggerDial)
			}
		case <-stagger.C:
			if launched < n {
				launch()
				stagger.Reset(staggerDial)
			}
		}
	}
	if len(errs) == 1 {
		return nil, errs[0]
	}
	return nil, errors.Join(errs...)
}

// dialer opens the TCP connection of one attempt, bounded by ctx and
// dialTimeout; the deadline also bounds the TLS and AMQP handshakes, and
// amqp091 clears it once the connection is open (heartbeats take over).
func dialer(ctx context.Context) func(network, addr string) (net.Conn, error) {
	return func(network, addr string) (net.Conn, error) {
		d := net.Dialer{Timeout: dialTimeout}
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		deadline := time.Now().Add(dialTimeout)
		if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
			deadline = dl
		}
		if err := conn.SetDeadline(deadline); err != nil {
			conn.Close()
			return nil, err
		}
		return conn, nil
	}
}

// Explain turns what amqp091 returns when the node refuses cfg's
// connection settings (TLS, credentials, permissions) into an error
// naming the setting to change and what to do, keeping the node's words;
// any other error comes back unchanged.
func Explain(cfg config.Config, err error) error {
	if done, e := driverutil.Explained(cfg, err, tlsKeys); done {
		return e
	}
	raw := cfg.Get(SettingURL)
	if urls := URLs(raw); len(urls) > 0 {
		raw = urls[0] // a cluster's URLs share user and vhost (checkURL)
	}
	user, vhost := "guest", "/"
	if u, perr := url.Parse(raw); perr == nil {
		if u.User != nil {
			user = u.User.Username()
		}
		if v := strings.TrimPrefix(u.Path, "/"); v != "" {
			vhost, _ = url.PathUnescape(v)
		}
	}
	var ae *amqp.Error
	isAMQP := errors.As(err, &ae)
	switch {
	case errors.Is(err, amqp.ErrSASL):
		return config.Invalid(SettingSASL, nil, "the node offers none of the mechanisms the client tried (%v): use one its auth_mechanisms enable (plain, or external with the rabbitmq_auth_mechanism_ssl plugin)", err)
	case isAMQP && ae.Code == amqp.AccessRefused && (errors.Is(err, amqp.ErrCredentials) || strings.Contains(ae.Reason, "Login was refused")):
		if strings.EqualFold(cfg.Get(SettingSASL), SASLExternal) {
			return config.Invalid(SettingCertFile, nil, "the node refused the login of the client certificate's identity (%v): create that user on the node, or use plain", err)
		}
		return config.Invalid(SettingURL, nil, "the node refused the login of user %q (%v): check the user and password in the URL", user, err)
	case isAMQP && (ae.Code == amqp.NotAllowed || errors.Is(err, amqp.ErrVhost)):
		return config.Invalid(SettingURL, nil, "user %q may not open vhost %q (%v): grant it permissions there (rabbitmqctl set_permissions -p VHOST USER '.*' '.*' '.*'), or use the vhost it has", user, vhost, err)
	case isAMQP && ae.Code == amqp.AccessRefused:
		return config.Invalid(SettingURL, nil, "user %q lacks a permission on vhost %q (%v): the suite declares, writes and reads its own queues, so grant it configure, write and read there", user, vhost, err)
	case strings.HasPrefix(raw, "amqps://") && cfg.Get(SettingCertFile) == "" && notAMQP(err):
		// With TLS 1.3 the client's handshake ends before the node has
		// judged the client's (empty) certificate; the node's alert can
		// then be lost to a reset of the client's first write.
		return config.Invalid(SettingCertFile, nil, "the node hung up right after the TLS handshake (%v), as a node that requires a client certificate (fail_if_no_peer_cert) does to a client without one: set %s and %s", err, SettingCertFile, SettingKeyFile)
	case !strings.HasPrefix(raw, "amqps://") && notAMQP(err):
		return config.Invalid(SettingURL, nil, "the server did not answer the AMQP handshake as AMQP (%v): a TLS listener answers a plaintext client so; use amqps:// (with %s)", err, SettingCAFile)
	}
	return err
}

// errHungUp marks a dial that amqp091 ended with ErrClosed: the
// connection's reader stopped before the handshake finished, without a
// frame or an error to tell why, as when the node closes the socket.
var errHungUp = errors.New("the node closed the connection during the handshake")

// handshakeErr marks amqp091's ErrClosed from a dial as errHungUp. The
// handshake's next write finds the connection closed when the reader has
// just failed on the node's hang-up, before its reason reached the
// caller (amqp091 Connection.send); that is a hang-up too.
func handshakeErr(err error) error {
	if errors.Is(err, amqp.ErrClosed) {
		return fmt.Errorf("%w: %w", errHungUp, err)
	}
	return err
}

// notAMQP reports an error from a server that did not speak AMQP during
// the handshake: it hung up (end of file, a reset), or sent what does not
// parse as an AMQP frame (a TLS alert record, as a TLS listener answers
// a plaintext client with).
func notAMQP(err error) bool {
	if errors.Is(err, errHungUp) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
		return true
	}
	var ae *amqp.Error
	return errors.As(err, &ae) && ae.Code == amqp.FrameError
}

// errorf is fmt.Errorf with the errors among args explained against cfg.
func errorf(cfg config.Config, format string, args ...any) error {
	for i, a := range args {
		if err, ok := a.(error); ok {
			args[i] = Explain(cfg, err)
		}
	}
	return fmt.Errorf(format, args...)
}
