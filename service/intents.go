package service

import (
	"sync"
	"time"
)

// Intents remember when each event was meant to be published: the
// envelope's intendedat, which the service's tables do not hold. An
// effect's end-to-end latency is its commit time minus its event's
// intended time, looked up by (aggregate, version).
type Intents struct {
	mu sync.Mutex
	at map[versionKey]int64 // unix ns
}

// NewIntents returns an empty set.
func NewIntents() *Intents { return &Intents{at: map[versionKey]int64{}} }

// Record notes the intended time of (aggregate, version); a later record
// of the same event (a republish, a retry) keeps the first.
func (in *Intents) Record(aggregate string, version int64, at time.Time) {
	k := versionKey{aggregate, version}
	in.mu.Lock()
	if _, ok := in.at[k]; !ok {
		in.at[k] = at.UnixNano()
	}
	in.mu.Unlock()
}

// Latency is e's commit time minus its event's intended time; ok is false
// for an event never recorded (published before the observation began,
// or never published: the checker calls that out).
func (in *Intents) Latency(e Effect) (time.Duration, bool) {
	in.mu.Lock()
	at, ok := in.at[versionKey{e.Aggregate, e.Version}]
	in.mu.Unlock()
	if !ok {
		return 0, false
	}
	return e.Commit.Sub(time.Unix(0, at)), true
}
