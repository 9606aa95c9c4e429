package inbox

// What a strategy file handles. A scenario or workload that needs a
// feature a file lacks is not applicable to it (Scoped): the header
// declares what the file implements beyond the article's transaction, and
// its SQL shows whether it writes each consumer's own business table.

// FeatureIdempotencyKeys is what a file declares with the header
// "idempotency-keys: true": it handles client idempotency keys (replays
// answered DUPLICATE, a reused key with other content CONFLICT).
const FeatureIdempotencyKeys = "idempotency-keys"

// FeatureConsumerTables is writing the business table of the consumer an
// event is applied for (Options.AccountTable): a file has it when its
// effect statements name {{account}}, which is rendered per consumer. One
// that writes {{schema}}.account instead puts every consumer's effects
// into the default table.
const FeatureConsumerTables = "consumer-tables"

// Lacks implements Scoped: why the file does not handle feature, "" when
// it does.
func (s *FileStrategy) Lacks(feature string) string {
	switch feature {
	case FeatureIdempotencyKeys:
		if s.f.Header.IdempotencyKeys {
			return ""
		}
		return s.Name() + " does not declare it (header " + feature + ": true)"
	case FeatureConsumerTables:
		return s.f.ConsumerTables()
	}
	return s.Name() + " does not declare " + feature
}

// Warnings are what a file that loads should still fix, each naming the
// file, the statement and what to write instead: effect statements that
// never name {{account}}.
func (s *FileStrategy) Warnings() []string {
	if w := s.f.ConsumerTables(); w != "" {
		return []string{w}
	}
	return nil
}
