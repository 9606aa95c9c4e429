package config

import (
	"regexp"
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
