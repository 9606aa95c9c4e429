package main

import (
	"regexp"
	"strings"

	"github.com/inboxbench/inboxbench/calibrate"
	"github.com/inboxbench/inboxbench/compose"
	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/dbcalib"
	"github.com/inboxbench/inboxbench/results/render"
	"github.com/inboxbench/inboxbench/runner"
)

// The library packages name a setting in their errors by its key
// (config.SettingError): a registered setting's ("kafka.brokers") or an
// option's ("runner.workers.local"). bench registered the flags, so it
// names the setting the way its user gave it: the flag, and for a
// registered setting the environment variable too.

// optionFlags are the flags of bench that set the libraries' options, by
// key. Registered settings come from the config registry instead.
var optionFlags = map[string]string{
	runner.KeyRunID:                  "run-id",
	runner.KeyRounds:                 "rounds",
	runner.KeyWarmupRounds:           "warmup-rounds",
	runner.KeyWarmupFor:              "warmup-rounds-for",
	runner.KeyReplace:                "replace",
	runner.KeyAuditMode:              "audit",
	runner.KeyRetryAttempts:          "retry-attempts",
	runner.KeyRetryFor:               "retry-for",
	runner.KeyBacklog:                "backlog",
	runner.KeySearch:                 "find-max-rate",
	runner.KeySearchFractions:        "at-fractions",
	runner.KeySearchRates:            "at-rates",
	runner.KeySearchMaxBacklogGrowth: "max-backlog-growth",
	runner.KeySearchPrecision:        "rate-precision",
	runner.KeyWorkersLocal:           "workers",
	runner.KeyWorkersRemote:          "remote-workers",
	runner.KeyPartitionInterval:      "partition-interval",
	runner.KeyExternalURL:            "external-url",
	calibrate.KeyBrokers:             "brokers",
	calibrate.KeyMessageSize:         "size",
	calibrate.KeyShards:              "shards",
	calibrate.KeyProducers:           "producers",
	calibrate.KeyConsumers:           "consumers",
	calibrate.KeyBatch:               "batch",
	calibrate.KeyPrefetch:            "prefetch",
	calibrate.KeyMaxBatch:            "max-batch",
	calibrate.KeyDuration:            "duration",
	calibrate.KeyWarmup:              "warmup",
	calibrate.KeyRounds:              "rounds",
	calibrate.KeyMaxDrain:            "max-drain",
	calibrate.KeyRates:               "rate",
	dbcalib.KeyStrategies:            "strategies",
	dbcalib.KeyCompare:               "compare",
	dbcalib.KeyRounds:                "rounds",
	dbcalib.KeyMeasure:               "duration",
	compose.KeyDurability:            "durability",
	render.KeyOut:                    "out",
}

// settingName is how a user gives the setting with key: "--workers", or
// "--kafka-brokers / INBOXBENCH_KAFKA_BROKERS" for a registered setting.
func settingName(key string) (string, bool) {
	for _, s := range config.Settings() {
		if s.Key == key {
			return "--" + s.Flag + " / " + s.Env, true
		}
	}
	if f, ok := optionFlags[key]; ok {
		return "--" + f, true
	}
	return "", false
}

// keyLike matches what may be a setting key in a message.
var keyLike = regexp.MustCompile(`[a-z][a-z0-9-]*(?:\.[a-z][a-z0-9-]*)+`)

// describe is err as bench prints it: each setting error in it names its
// setting, and the other settings it mentions by key, as the user gives
// them.
func describe(err error) string {
	msg := err.Error()
	for _, se := range settingErrors(err) {
		name, ok := settingName(se.Key)
		if !ok {
			name = se.Key
		}
		text := keyLike.ReplaceAllStringFunc(se.Text(name), func(k string) string {
			if n, ok := settingName(k); ok {
				return n
			}
			return k
		})
		msg = strings.Replace(msg, se.Error(), text, 1)
	}
	return msg
}

// settingErrors finds the setting errors in err's tree, outermost first;
// one inside another is described with it.
func settingErrors(err error) []*config.SettingError {
	switch u := err.(type) {
	case *config.SettingError:
		return []*config.SettingError{u}
	case interface{ Unwrap() error }:
		if w := u.Unwrap(); w != nil {
			return settingErrors(w)
		}
	case interface{ Unwrap() []error }:
		var out []*config.SettingError
		for _, w := range u.Unwrap() {
			out = append(out, settingErrors(w)...)
		}
		return out
	}
	return nil
}
