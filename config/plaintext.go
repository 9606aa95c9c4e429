package config

import (
	"net"
	"net/netip"
	"strings"
)

// SettingAllowPlaintextPasswords lets a driver send a password in clear
// (SASL PLAIN, AMQP PLAIN) over a connection without TLS to a host other
// than this one; without it, such a configuration is refused. Traffic to
// a loopback address never leaves the host, so it needs no permission.
var SettingAllowPlaintextPasswords = Register(Setting{Key: "security.allow-plaintext-passwords", Flag: "allow-plaintext-passwords",
	Env: "INBOXBENCH_ALLOW_PLAINTEXT_PASSWORDS", Kind: Bool,
	Usage: "allow a password to be sent in clear (SASL or AMQP PLAIN without TLS) to a host other than this one"})

// PlaintextPasswordAllowed reports whether a password may go in clear to
// every one of addrs (host:port or bare hosts): each is a loopback
// address or "localhost", or the user allowed it explicitly.
func (c Config) PlaintextPasswordAllowed(addrs []string) bool {
	if c.Bool(SettingAllowPlaintextPasswords) {
		return true
	}
	for _, a := range addrs {
		if !IsLoopback(a) {
			return false
		}
	}
	return true
}

// IsLoopback reports whether addr (host:port or a bare host) names this
// host without a name lookup: a loopback IP address or "localhost".
func IsLoopback(addr string) bool {
	host := addr
	if h, _, err := net.SplitHostPort(addr); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}
