package results

// Verdict is what the checker said of a cell (Invariants) or a
// conformance row; its values are the JSON's.
type Verdict string

// Verdicts.
const (
	VerdictPass Verdict = "PASS"
	VerdictFail Verdict = "FAIL"
	// VerdictError marks a cell or a scenario that did not complete: its
	// Error says why.
	VerdictError Verdict = "ERROR"
	// VerdictNA marks a conformance row that did not run: the scenario
	// tests something the strategy does not declare it implements, or
	// needs what the broker cannot do. Reason says which.
	VerdictNA Verdict = "N/A"
)

// Mode is how a cell published (Cell.Mode).
type Mode string

// Modes.
const (
	// ModeSaturated: as fast as the broker confirmed; the cell's latency
	// is queueing-dominated, read it as a throughput run.
	ModeSaturated Mode = "saturated"
	// ModeFixedRate: at the workload's open-loop rate.
	ModeFixedRate Mode = "fixed-rate"
	// ModeRateSearch: Cell.Rate holds the steps and the maximum
	// sustainable rate.
	ModeRateSearch Mode = "rate-search"
	// ModeBacklog: the whole stream published before the consumers
	// started; events/s is the drain rate.
	ModeBacklog Mode = "backlog"
)

// Bound is what set a cell's pace (Throughput.Bound).
type Bound string

// Bounds.
const (
	// BoundPublish: the consumers kept up with a publisher sending as
	// fast as the broker confirmed, so the broker's publish path set the
	// pace.
	BoundPublish Bound = "publish"
	// BoundRate: they kept up with the workload's open-loop rate.
	BoundRate Bound = "rate"
	// BoundConsume: a backlog built up, so delivery, the consumers or the
	// database set the pace.
	BoundConsume Bound = "consume"
	// BoundLatency: a rate search limited by its p99 bound.
	BoundLatency Bound = "latency"
)

// Limit is what limited a rate search (RateSearch.LimitedBy) or made a
// step unsustainable (RateStep.Limit).
type Limit string

// Limits.
const (
	LimitPublish Limit = "publish" // the broker did not take the rate
	LimitBacklog Limit = "backlog" // the consumers fell behind
	LimitP99     Limit = "p99"     // latency over the bound
	// The search stopped at its bounds (its steps, its time) before a
	// step failed, or found not even its slowest step sustainable.
	LimitSteps Limit = "steps"
	LimitTime  Limit = "time"
	LimitFloor Limit = "floor"
)

// Bound is what bound a rate-search cell limited by l.
func (l Limit) Bound() Bound {
	switch l {
	case LimitPublish:
		return BoundPublish
	case LimitBacklog:
		return BoundConsume
	case LimitP99:
		return BoundLatency
	}
	return ""
}
