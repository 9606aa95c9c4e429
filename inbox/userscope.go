package inbox

// What a strategy file handles. A scenario or workload that needs a
// feature a file lacks is not applicable to it (Scoped): the header
// declares what the file implements beyond the article's transaction.

// FeatureIdempotencyKeys is what a file declares with the header
// "idempotency-keys: true": it handles client idempotency keys (replays
// answered DUPLICATE, a reused key with other content CONFLICT).
const FeatureIdempotencyKeys = "idempotency-keys"

// Lacks implements Scoped: why the file does not handle feature, "" when
// it does.
func (s *FileStrategy) Lacks(feature string) string {
	switch feature {
	case FeatureIdempotencyKeys:
		if s.f.header.idempotencyKeys {
			return ""
		}
		return s.Name() + " does not declare it (header " + feature + ": true)"
	}
	return s.Name() + " does not declare " + feature
}
