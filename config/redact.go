package config

import (
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// Secrets never reach a file a user may publish (result.json, report.md,
// report.html, conform.json) or a message: every command line and URL that
// is recorded or printed goes through Redact or RedactArgs, the one place
// that knows what a secret looks like.

const mask = "***"

// dsnPassword matches password=… in a key=value DSN or a URL query, quoted
// ('…' with \' escapes) or bare (up to a space or &).
var dsnPassword = regexp.MustCompile(`(?i)(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&]*)`)

// Redact hides credentials in one string: the password of a URL's userinfo
// (scheme://user:pass@host, a password containing '@' included) and any
// password=… of a key=value DSN or URL query. Other text is unchanged.
func Redact(s string) string {
	s = dsnPassword.ReplaceAllString(s, "${1}"+mask)
	// A list of URLs (the nodes of one cluster): each on its own, split
	// at the commas that begin another URL.
	parts := strings.Split(s, ",")
	var urls []string
	for _, p := range parts {
		if len(urls) > 0 && !urlStart.MatchString(p) {
			urls[len(urls)-1] += "," + p
			continue
		}
		urls = append(urls, p)
	}
	for i, u := range urls {
		urls[i] = redactURL(u)
	}
	return strings.Join(urls, ",")
}

// urlStart matches text that begins with a URL's scheme.
var urlStart = regexp.MustCompile(`^\s*[A-Za-z][A-Za-z0-9+.-]*://`)

// redactURL hides the password of the URL's userinfo.
func redactURL(s string) string {
	i := strings.Index(s, "://")
	if i < 0 {
		return s
	}
	rest := s[i+3:]
	// The authority ends at the query; the userinfo at its last '@' (an
	// unescaped '@' in a password is common enough to handle).
	end := len(rest)
	if q := strings.IndexAny(rest, "?#"); q >= 0 {
		end = q
	}
	at := strings.LastIndex(rest[:end], "@")
	if at < 0 {
		return s
	}
	user, _, hasPass := strings.Cut(rest[:at], ":")
	if !hasPass {
		return s
	}
	return s[:i+3] + user + ":" + mask + rest[at:]
}

// RedactArgs returns a command line with the values of secret flags
// (--kafka-password X, --kafka-password=X), secret variables given as
// NAME=value, and every credential in a URL or DSN replaced by ***.
func RedactArgs(args []string) []string {
	secret := secretFlags()
	envs := map[string]bool{}
	for _, s := range Settings() {
		if s.Secret {
			envs[s.Env] = true
		}
	}
	out := make([]string, len(args))
	hideNext := false
	for i, a := range args {
		switch {
		case hideNext:
			out[i], hideNext = mask, false
			continue
		case strings.HasPrefix(a, "-"):
			name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
			if secret[name] {
				if hasValue {
					out[i] = a[:strings.Index(a, "=")+1] + mask
				} else {
					out[i], hideNext = a, true
				}
				continue
			}
		default:
			if name, _, ok := strings.Cut(a, "="); ok && envs[name] {
				out[i] = name + "=" + mask
				continue
			}
		}
		out[i] = Redact(a)
	}
	return out
}

// secretFlags names the flags whose value is a secret.
func secretFlags() map[string]bool {
	out := map[string]bool{}
	for _, s := range Settings() {
		if s.Secret {
			out[s.Flag] = true
		}
	}
	return out
}

// Shown is how a value that was not accepted is shown in its error: ***
// for a secret setting's, Redact's text when it hid a credential, and
// nothing (nil, for SettingError.Value) when the value has an '@' that
// Redact did not recognise as a URL's userinfo (a malformed URL, a
// missing scheme: "amqp:/user:pass@host"), which may be a password.
func Shown(v string, secret bool) any {
	switch r := Redact(v); {
	case secret:
		return mask
	case r != v:
		return r
	case strings.Contains(v, "@"):
		return nil
	}
	return v
}

// Secrets lists what c must never show: the value of every Secret
// setting and the password inside any setting's URL or DSN (the
// PostgreSQL URL's, the RabbitMQ URL's), as given and decoded. A password
// that is also in the setting's default (the local stack's documented
// one) is left out: it is printed in the README, and masking it would
// also mask the user, database and vhost of the same name.
func (c Config) Secrets() []string {
	var out []string
	for _, s := range Settings() {
		v := c.Get(s.Key)
		if v == "" {
			continue
		}
		if s.Secret {
			out = append(out, v)
			continue
		}
		public := passwordsIn(s.Default)
		for _, p := range passwordsIn(v) {
			if !slices.Contains(public, p) {
				out = append(out, p)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// passwordsIn finds the passwords in a URL's userinfo or query and in a
// key=value DSN, each as written and percent-decoded. It reads malformed
// URLs too (an unescaped '%' or '@' in the password), the way Redact does.
func passwordsIn(v string) []string {
	var out []string
	add := func(p string) {
		if p == "" {
			return
		}
		out = append(out, p)
		if d, err := url.PathUnescape(p); err == nil && d != p {
			out = append(out, d)
		}
		if d, err := url.QueryUnescape(p); err == nil && d != p {
			out = append(out, d)
		}
	}
	for _, m := range dsnPassword.FindAllStringSubmatch(v, -1) {
		p := m[2]
		if len(p) >= 2 && p[0] == '\'' && p[len(p)-1] == '\'' {
			p = strings.NewReplacer(`\'`, "'", `\\`, `\`).Replace(p[1 : len(p)-1])
		}
		add(p)
	}
	if i := strings.Index(v, "://"); i >= 0 {
		rest := v[i+3:]
		if q := strings.IndexAny(rest, "?#"); q >= 0 {
			rest = rest[:q]
		}
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			if _, p, ok := strings.Cut(rest[:at], ":"); ok {
				add(p)
			}
		}
	}
	return out
}

// RedactSecrets is Redact(s) with every one of c's Secrets masked
// wherever it appears, in any form a URL or a tool would print it: for
// text this program did not compose itself (a vendor tool's output and
// log, a library's error), where a credential may stand anywhere.
func (c Config) RedactSecrets(s string) string {
	s = Redact(s)
	secrets := c.Secrets()
	// The longest first: a secret inside another is masked with it.
	slices.SortFunc(secrets, func(a, b string) int { return len(b) - len(a) })
	for _, p := range secrets {
		for _, form := range []string{p, url.PathEscape(p), url.QueryEscape(p), url.UserPassword("u", p).String()[2:]} {
			s = strings.ReplaceAll(s, form, mask)
		}
	}
	return s
}

// RedactSecretArgs is RedactArgs(args) with c's Secrets masked in every
// argument: a vendor tool's command line as a log or a result records it.
func (c Config) RedactSecretArgs(args []string) []string {
	out := RedactArgs(args)
	for i, a := range out {
		out[i] = c.RedactSecrets(a)
	}
	return out
}

// RedactError returns err with RedactSecrets applied to its text;
// errors.Is and errors.As still see err (nil stays nil).
func (c Config) RedactError(err error) error {
	if err == nil {
		return nil
	}
	return redactedError{err: err, text: c.RedactSecrets(err.Error())}
}

// redactedError is an error whose text has its secrets redacted; it
// still unwraps to the original.
type redactedError struct {
	err  error
	text string
}

// Error is the redacted text.
func (r redactedError) Error() string { return r.text }

// Unwrap is the original error.
func (r redactedError) Unwrap() error { return r.err }
