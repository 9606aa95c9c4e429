package driverutil

import (
	"errors"
	"strings"

	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/internal/tlsfiles"
)

// Setting registers s as the driver's setting name under the names every
// driver's settings follow: the key "<driver>.<name>", the flag
// "--<driver>-<name>" and the variable INBOXBENCH_<DRIVER>_<NAME> (dashes
// as underscores). It returns the key.
func Setting(driver, name string, s config.Setting) string {
	s.Key = driver + "." + name
	s.Flag = driver + "-" + name
	s.Env = "INBOXBENCH_" + strings.ToUpper(strings.ReplaceAll(driver+"_"+name, "-", "_"))
	return config.Register(s)
}

// TLSUsage are the usage texts of a driver's TLS settings.
type TLSUsage struct {
	// Switch is the text of <driver>.tls, the switch that turns TLS on;
	// "" when the driver has none (RabbitMQ: the URL's scheme does).
	Switch string
	// CA, Cert, Key and ServerName are the texts of <driver>.ca-file,
	// .cert-file, .key-file and .server-name.
	CA, Cert, Key, ServerName string
}

// RegisterTLS registers the driver's TLS settings with the texts u and
// returns them as the tlsfiles.Keys of a client that dials the addresses
// of the setting addr.
func RegisterTLS(driver, addr string, u TLSUsage) tlsfiles.Keys {
	k := tlsfiles.Keys{
		CA:         Setting(driver, "ca-file", config.Setting{Usage: u.CA}),
		Cert:       Setting(driver, "cert-file", config.Setting{Usage: u.Cert}),
		Key:        Setting(driver, "key-file", config.Setting{Usage: u.Key}),
		ServerName: Setting(driver, "server-name", config.Setting{Usage: u.ServerName}),
		Addr:       addr,
	}
	if u.Switch != "" {
		k.Switch = Setting(driver, "tls", config.Setting{Kind: config.Bool, Usage: u.Switch})
	}
	return k
}

// Explained is where every driver's Explain begins: it reports done, with
// what Explain returns, for a nil err, an error that names a setting
// already (config.SettingError) and a TLS problem tlsfiles.Explain names
// against the driver's keys k. The driver explains the rest itself.
func Explained(cfg config.Config, err error, k tlsfiles.Keys) (done bool, explained error) {
	if err == nil {
		return true, nil
	}
	var se *config.SettingError
	if errors.As(err, &se) {
		return true, err
	}
	if e := tlsfiles.Explain(err, cfg, k); e != err {
		return true, e
	}
	return false, err
}
