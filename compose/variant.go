package compose

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/inboxbench/inboxbench/config"
)

// Variants. The plain stack (one node per service, no TLS, the ports of
// the README's table) is what every command uses by default. A variant is
// another local stack beside it: its own services, its own directory
// under the stack directory (<stack-dir>/<variant>) and its own loopback
// ports, so that both can run at once and the plain one stays as it is.
// A variant's services tell the commands where they are (Endpointer):
// with --topology or --secure, every endpoint, certificate and credential
// setting the user did not set takes the variant's value.
const (
	VariantPlain      = ""
	VariantReplicated = "replicated" // several nodes per service, with failover
	VariantSecure     = "secure"     // TLS and authentication on every service
)

// Topologies.
const (
	TopologySingle     = "single"
	TopologyReplicated = "replicated"
)

// The settings that choose a variant, for every command (the stack, and
// the endpoints of run, conform, calibrate …).
var (
	SettingTopology = config.Register(config.Setting{Key: "stack.topology", Flag: "topology", Env: "INBOXBENCH_TOPOLOGY",
		Default: TopologySingle, Check: checkTopology,
		Usage: "which local stack the endpoints default to: single (one node per service) or replicated (several nodes per service; see 'bench stack --help')"})
	SettingSecure = config.Register(config.Setting{Key: "stack.secure", Flag: "secure", Env: "INBOXBENCH_SECURE", Kind: config.Bool,
		Usage: "default the endpoints, certificates and credentials to the local secure stack (TLS and authentication on every service; see 'bench stack --help')"})
)

func checkTopology(v string) error {
	switch v {
	case TopologySingle, TopologyReplicated:
		return nil
	}
	return fmt.Errorf("unknown topology: use %s or %s", TopologySingle, TopologyReplicated)
}

// VariantOf returns the variant cfg selects.
func VariantOf(cfg config.Config) (string, error) {
	replicated := cfg.Get(SettingTopology) == TopologyReplicated
	secure := cfg.Bool(SettingSecure)
	switch {
	case replicated && secure:
		return "", config.Invalid(SettingSecure, nil, "the secure stack runs one node per service: use it without %s=%s, or the replicated stack without %s", SettingTopology, TopologyReplicated, SettingSecure)
	case replicated:
		return VariantReplicated, nil
	case secure:
		return VariantSecure, nil
	}
	return VariantPlain, nil
}

// NewEnv returns the Env of the stack cfg selects: its directory and
// variant, progress to out.
func NewEnv(cfg config.Config, out io.Writer) (*Env, error) {
	v, err := VariantOf(cfg)
	if err != nil {
		return nil, err
	}
	dir, err := AbsDir(cfg.StackDir)
	if err != nil {
		return nil, err
	}
	if out == nil {
		out = io.Discard
	}
	return &Env{Dir: dir, Variant: v, Cfg: cfg, Out: out}, nil
}

// Endpointer is implemented by the services of a variant: the settings its
// clients need to reach it (addresses, certificate files, credentials), by
// setting key. A value may depend on files `bench stack up` wrote (a
// generated password, a CA); before that, Endpoints returns an error
// saying to start the stack.
type Endpointer interface {
	Endpoints(e *Env) (map[string]string, error)
}

// Addresser is implemented by the services of a variant whose endpoints
// need files `bench stack up` writes: what they are without those files
// (addresses, certificate paths, users; no password), so that the stack
// commands bind and dial the variant's ports, never the plain stack's,
// before its first start.
type Addresser interface {
	Addresses(e *Env) map[string]string
}

// Endpoints merges the settings of every service of e's variant. When a
// service's endpoints are not there yet, the error says so, and the map
// still holds what could be had: every other service's endpoints and that
// service's addresses (Addresser).
func Endpoints(e *Env) (map[string]string, error) {
	out := map[string]string{}
	var errs []error
	for _, s := range Services(e.Variant) {
		ep, ok := s.(Endpointer)
		if !ok {
			continue
		}
		vals, err := ep.Endpoints(e)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s stack: %s: %w", e.Variant, s.Name(), err))
			if a, ok := s.(Addresser); ok {
				vals = a.Addresses(e)
			}
		}
		for k, v := range vals {
			out[k] = v
		}
	}
	return out, errors.Join(errs...)
}

// ApplyVariant returns cfg with the endpoints of the variant it selects in
// place of every setting the user did not set (cfg unchanged for the
// plain stack). The error says when the variant's stack has not written
// what its endpoints need yet; the returned configuration is then as
// complete as it could be made (the variant's addresses at least).
func ApplyVariant(cfg config.Config) (config.Config, error) {
	e, err := NewEnv(cfg, nil)
	if err != nil || e.Variant == VariantPlain {
		return cfg, err
	}
	if len(Services(e.Variant)) == 0 {
		return cfg, usageErrorf("the %s stack has no services in this build", e.Variant)
	}
	vals, err := Endpoints(e)
	if err != nil {
		return cfg.WithDefaults(vals), usageErrorf("%v: start it with 'bench stack up%s'", err, VariantFlag(e.Variant))
	}
	return cfg.WithDefaults(vals), nil
}

// VariantFlag is how a user selects variant on the command line, with a
// leading space ("" for the plain stack), to append to a command.
func VariantFlag(variant string) string {
	switch variant {
	case VariantReplicated:
		return " --topology " + TopologyReplicated
	case VariantSecure:
		return " --secure"
	}
	return ""
}

// variantDir is where a variant keeps its state under the stack directory.
func variantDir(root, variant string) string {
	if variant == VariantPlain {
		return root
	}
	return filepath.Join(root, variant)
}
