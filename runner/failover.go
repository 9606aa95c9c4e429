package runner

import "fmt"

// failoverActions are the actions of the plan's failover faults, made by
// Options.Stream.Failover (package failover, against the local
// replicated stack).
func (c *cell) failoverActions() ([]Action, error) {
	faults := c.o.Spec.Faults.Failover
	if len(faults) == 0 {
		return nil, nil
	}
	out := make([]Action, 0, len(faults))
	for i, f := range faults {
		a, err := c.o.Stream.Failover(f)
		if err != nil {
			return nil, fmt.Errorf("faults.failover[%d] (%s): %w", i, f.Name(), err)
		}
		out = append(out, a)
	}
	return out, nil
}
