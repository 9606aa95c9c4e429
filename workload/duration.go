package workload

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Duration is a time.Duration written as "30s", "2m" in YAML and JSON.
type Duration time.Duration

// D is the duration as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// Or is d, or def where d is unset (0 or less): a workload file's
// optional duration with its default.
func (d Duration) Or(def time.Duration) time.Duration {
	if d > 0 {
		return d.D()
	}
	return def
}

// UnmarshalYAML reads "30s", "2m", "1m30s" or whole days ("30d"), naming
// the line of a value it cannot read.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return err
	}
	v, err := parseDuration(s)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a duration: write e.g. 30s, 2m, 1m30s or 30d", n.Line, s)
	}
	*d = Duration(v)
	return nil
}

// MarshalText writes the duration as time.Duration.String does ("1m30s").
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText reads what UnmarshalYAML reads.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := parseDuration(string(b))
	*d = Duration(v)
	return err
}

// parseDuration is time.ParseDuration that also takes whole days ("30d"),
// the unit retention is spoken in.
func parseDuration(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 || n > 100_000 {
			return 0, fmt.Errorf("%q: write whole days such as 30d", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	return time.ParseDuration(s)
}
