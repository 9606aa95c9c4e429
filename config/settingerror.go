package config

import (
	"fmt"
	"strconv"
)

// SettingError is an error about one setting, named by its key: a
// registered setting's ("kafka.brokers") or a library option's
// ("runner.workers.local", the option's field path). Libraries return it
// rather than naming a flag: they are used by the CLI, by tests and by
// other programs, and only the program that took the value from its user
// knows how the user gave it. cmd/bench names the flag, and for a
// registered setting its environment variable too (Text); its message may
// mention other settings by their keys.
type SettingError struct {
	Key string
	// Value is what was given, shown after the setting; nil leaves it
	// out (secrets are never given).
	Value any
	Err   error
}

// Invalid returns a *SettingError: key's value (nil: not shown) is not
// accepted, for the formatted reason.
func Invalid(key string, value any, format string, a ...any) error {
	return &SettingError{Key: key, Value: value, Err: fmt.Errorf(format, a...)}
}

// Error names the setting by its key (Text names it as a program does).
func (e *SettingError) Error() string { return e.Text(e.Key) }

// Unwrap is the error underneath, if any.
func (e *SettingError) Unwrap() error { return e.Err }

// Text is the error with the setting called name (a program's own name
// for it: its flag).
func (e *SettingError) Text(name string) string {
	if e.Value == nil {
		return name + ": " + e.Err.Error()
	}
	v := fmt.Sprint(e.Value)
	if s, ok := e.Value.(string); ok {
		v = strconv.Quote(s)
	}
	return name + " " + v + ": " + e.Err.Error()
}
