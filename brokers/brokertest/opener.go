package brokertest

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/inboxbench/inboxbench/brokers"
	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/internal/testenv"
)

// Opener opens a fresh instance of a driver with options (nil: the
// defaults) for one test. A driver's tests make one (OnStack, InProcess)
// and hand its methods to the suite: New as the NewBroker of Run, Window
// to WithWindow.
type Opener func(tb testing.TB, opts brokers.Options) (brokers.Broker, error)

// OnStack opens the driver registered as name with the local stack's
// configuration, once service answers there (testenv.Require: the test
// fails, naming what to run, when it does not).
func OnStack(name, service string) Opener {
	return func(tb testing.TB, opts brokers.Options) (brokers.Broker, error) {
		return brokers.Open(context.Background(), name, testenv.Require(tb, service), opts)
	}
}

// InProcess opens the driver registered as name, whose broker lives in
// the test's process (none, kafka-embedded): no stack, the default
// configuration.
func InProcess(name string) Opener {
	return func(tb testing.TB, opts brokers.Options) (brokers.Broker, error) {
		return brokers.Open(context.Background(), name, config.Default(), opts)
	}
}

// New opens the driver with its default options: a NewBroker.
func (o Opener) New(tb testing.TB) brokers.Broker { return o.With(tb, nil) }

// With opens the driver with opts; the test fails when it cannot, and the
// broker is closed when the test ends (the test fails when Close does).
func (o Opener) With(tb testing.TB, opts brokers.Options) brokers.Broker {
	tb.Helper()
	b, err := o(tb, opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := b.Close(); err != nil {
			tb.Errorf("close: %v", err)
		}
	})
	return b
}

// Window opens the driver with a publish window of n messages (the
// option "publish-window" of every driver that has one), for WithWindow.
func (o Opener) Window(tb testing.TB, n int) brokers.Broker {
	return o.With(tb, brokers.Options{"publish-window": strconv.Itoa(n)})
}

// Refusal is a configuration a secure stack refuses (Name says how it
// differs from a good one), and what the driver must make of it: a
// config.SettingError naming Key whose text holds Text.
type Refusal struct {
	Name      string
	Cfg       config.Config
	Key, Text string
}

// Refusals opens the driver registered as name with each refused
// configuration and sets a topic up: each must end with the setting error
// its case names before a minute has passed, so nothing was retried
// until a timeout.
func Refusals(t *testing.T, name string, cases ...Refusal) {
	for _, tc := range cases {
		t.Run(strings.ReplaceAll(tc.Name, " ", "_"), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			b, err := brokers.Open(ctx, name, tc.Cfg, nil)
			if err == nil {
				defer b.Close()
				err = b.Setup(ctx, UniqueName(t, "ib"), 1)
			}
			var se *config.SettingError
			if !errors.As(err, &se) || se.Key != tc.Key || !strings.Contains(err.Error(), tc.Text) || ctx.Err() != nil {
				t.Fatalf("Setup: %v (context: %v); want a setting error naming %s that says %q, before the context ends", err, ctx.Err(), tc.Key, tc.Text)
			}
			t.Logf("%v", err)
		})
	}
}
