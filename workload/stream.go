package workload

// Stream is a workload without an end, for a cell that runs for a time
// rather than for a number of events (Spec.Measure): chunk after chunk of
// Spec.Events events, each continuing the same aggregates' versions and
// balances where the one before left them, so the stream keeps the
// workload's shape (its aggregates, their skew, its faults) however long
// the cell runs. The first chunk is Generate's plan. The next chunk is
// generated while the current one is published.
type Stream struct {
	g     *generator
	ahead chan *Plan
	stop  chan struct{}
}

// NewStream starts generating s's stream; Close ends it.
func NewStream(s *Spec) *Stream { return NewStreamSegment(s, "") }

// NewStreamSegment is NewStream with aggregate ids starting with prefix
// (GenerateSegment's): a rate search's steps each publish a stream of
// their own through one topic and schema.
func NewStreamSegment(s *Spec, prefix string) *Stream {
	st := &Stream{g: newGenerator(s, prefix), ahead: make(chan *Plan, 1), stop: make(chan struct{})}
	go func() {
		defer close(st.ahead)
		for {
			p := st.g.chunk()
			select {
			case st.ahead <- p:
			case <-st.stop:
				return
			}
		}
	}()
	return st
}

// Next returns the next chunk; nil after Close.
func (st *Stream) Next() *Plan { return <-st.ahead }

// Close stops generating.
func (st *Stream) Close() {
	select {
	case <-st.stop:
	default:
		close(st.stop)
	}
}

// Concat joins consecutive chunks of one stream into the plan of all of
// them: their events and sends in order, and the aggregates' states after
// the last.
func Concat(chunks []*Plan) *Plan {
	if len(chunks) == 1 {
		return chunks[0]
	}
	out := &Plan{Expected: map[string]State{}}
	for _, c := range chunks {
		out.Spec = c.Spec
		out.Events = append(out.Events, c.Events...)
		out.Publishes = append(out.Publishes, c.Publishes...)
		out.MustNotApply = append(out.MustNotApply, c.MustNotApply...)
		out.OutOfOrder += c.OutOfOrder
		out.Republished += c.Republished
		for agg, st := range c.Expected {
			out.Expected[agg] = st
		}
	}
	return out
}
