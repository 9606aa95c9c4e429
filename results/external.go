package results

// External is a cell's external service: its settings and its calls, as
// its call log records them.
type External struct {
	// DelayMs is the service's time per call; TimeoutMs how long a caller
	// waited for an answer before giving up.
	DelayMs   float64 `json:"delay_ms"`
	TimeoutMs float64 `json:"timeout_ms"`
	// Calls counts the payment requests the service received; Effects
	// those it applied (a new payment): the external effects, one per
	// event that took effect when the strategy is right.
	Calls   int64 `json:"calls"`
	Effects int64 `json:"effects"`
	// Replays are repeats of a key answered with its stored result;
	// Conflicts keys reused with another request, refused; Refused calls
	// refused while the service was unavailable; TimedOut calls applied
	// whose answer was held until the caller gave up (the fault); Queries
	// result queries by key.
	Replays   int64 `json:"replays"`
	Conflicts int64 `json:"conflicts"`
	Refused   int64 `json:"refused"`
	TimedOut  int64 `json:"timed_out"`
	Queries   int64 `json:"queries"`
}
