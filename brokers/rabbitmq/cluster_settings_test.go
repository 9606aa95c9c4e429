package rabbitmq

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/inboxbench/inboxbench/config"
)

// TestURLs: a cluster's node URLs split at the commas that begin another
// URL; a comma inside one (a password) stays.
func TestURLs(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"amqp://u:p@h:1/v", []string{"amqp://u:p@h:1/v"}},
		{"amqp://u:p@a:1/v, amqp://u:p@b:2/v,amqps://u:p@c:3/v", []string{"amqp://u:p@a:1/v", "amqp://u:p@b:2/v", "amqps://u:p@c:3/v"}},
		{"amqp://u:p,w@a:1/v,amqp://u:p,w@b:2/v", []string{"amqp://u:p,w@a:1/v", "amqp://u:p,w@b:2/v"}},
		{"", nil},
	} {
		if got := URLs(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("URLs(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestCheckURL: every URL must be an AMQP URI, and several must differ
// only in host and port; the error names the URL, without its password.
func TestCheckURL(t *testing.T) {
	for _, ok := range []string{DefaultURL, "amqp://u:p@a:1/v,amqp://u:p@b:2/v"} {
		if err := checkURL(ok); err != nil {
			t.Errorf("checkURL(%q): %v", ok, err)
		}
	}
	for in, want := range map[string]string{
		"http://h/v":                            "must start with amqp://",
		"amqp://u:p@a:1/v,amqp://u:p@b:x/v":     "URL 2 of 2: ",
		"amqp://u:p@a:1/v,amqp://u:other@b:2/v": "differs from the first",
		"amqp://u:p@a:1/v,amqp://u:p@b:2/w":     "differs from the first",
	} {
		err := checkURL(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("checkURL(%q) = %v, want an error saying %q", in, err, want)
		}
		if err != nil && strings.Contains(err.Error(), ":other@") {
			t.Errorf("checkURL(%q) shows a password: %v", in, err)
		}
	}
}

// TestNewRefusesBadSettings: a bad value is a setting error naming the
// key (the CLI maps it to its flag and exit code 2).
func TestNewRefusesBadSettings(t *testing.T) {
	for key, v := range map[string]string{
		SettingURL:        "amqp://u:p@a:1/v,amqp://u:p@b:2/w",
		SettingQueueType:  "stream",
		SettingQuorumSize: "0",
	} {
		_, err := New(context.Background(), config.Default().With(key, v), nil)
		var se *config.SettingError
		if !errors.As(err, &se) || se.Key != key {
			t.Errorf("%s=%q: %v, want a setting error naming %s", key, v, err, key)
		}
	}
}
