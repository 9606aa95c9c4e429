package compose

import (
	"fmt"
	"slices"
	"strings"
)

// Variants are a service's constructors by variant (VariantPlain,
// VariantReplicated, VariantSecure): what it runs as in each stack. A
// stack has no such service where its variant has no constructor.
type Variants map[string]func() Service

// registration is one service package's Register call, its services made.
type registration struct {
	name     string
	order    int
	services map[string]Service // by variant
}

// registry holds the registered services by name; each service package
// registers itself from its init(), so a stack is the set of packages
// the binary imports (compose/all imports them all).
var registry = map[string]registration{}

// Register adds the service name to the stacks of variants, at position
// order of each (the display order of `bench stack status`, and the
// order Down stops them in reverse: postgres 1, rabbitmq 2, kafka 3,
// rocketmq 4). Every constructor is called once, here; its service must
// be called name. It panics when name or order is taken, a variant is
// unknown or a constructor's service has another name: a programming
// error, found when the binary starts.
func Register(name string, order int, variants Variants) {
	if _, dup := registry[name]; dup {
		panic(fmt.Sprintf("compose: service %q registered twice", name))
	}
	for _, r := range registry {
		if r.order == order {
			panic(fmt.Sprintf("compose: services %q and %q registered at position %d", r.name, name, order))
		}
	}
	r := registration{name: name, order: order, services: map[string]Service{}}
	for variant, newService := range variants {
		if !slices.Contains(variantNames, variant) {
			panic(fmt.Sprintf("compose: service %q registered for an unknown variant %q", name, variant))
		}
		s := newService()
		if s.Name() != name {
			panic(fmt.Sprintf("compose: service %q registered for the %s stack as %q", name, variantName(variant), s.Name()))
		}
		r.services[variant] = s
	}
	registry[name] = r
}

// Services returns the services of a variant's stack in display order.
func Services(variant string) []Service {
	regs := make([]registration, 0, len(registry))
	for _, r := range registry {
		if r.services[variant] != nil {
			regs = append(regs, r)
		}
	}
	slices.SortFunc(regs, func(a, b registration) int { return a.order - b.order })
	out := make([]Service, len(regs))
	for i, r := range regs {
		out[i] = r.services[variant]
	}
	return out
}

// Select returns the named services of a variant's stack; an empty list
// selects all of them.
func Select(variant string, names []string) ([]Service, error) {
	all := Services(variant)
	if len(all) == 0 {
		return nil, usageErrorf("the %s stack has no services in this build", variantName(variant))
	}
	if len(names) == 0 {
		return all, nil
	}
	var out []Service
	for _, n := range names {
		i := slices.IndexFunc(all, func(s Service) bool { return s.Name() == n })
		if i < 0 {
			return nil, usageErrorf("unknown service %q in the %s stack: choose from %s", n, variantName(variant), strings.Join(Names(variant), ", "))
		}
		out = append(out, all[i])
	}
	return out, nil
}

// Names lists the service names of a variant's stack.
func Names(variant string) []string {
	var out []string
	for _, s := range Services(variant) {
		out = append(out, s.Name())
	}
	return out
}

// variantNames are the variants a service may register for.
var variantNames = []string{VariantPlain, VariantReplicated, VariantSecure}

func variantName(variant string) string {
	if variant == VariantPlain {
		return "plain"
	}
	return variant
}
