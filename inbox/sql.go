package inbox

import "strings"

// sqlText holds every statement with the schema and account table quoted
// in. Statements are plain strings so pgx's statement cache prepares each
// once per connection.
//
// One set of statements serves both inbox layouts: every inbox write
// carries the event's time (NULL when absent), which the plain layout only
// records and the partitioned layout needs as its partition key. Deletes
// of a claim name the time too (NULL-safe, in a form the planner can still
// use to prune partitions), so a claim withdrawn in the partitioned layout
// only ever touches its own partition and its own row.
type sqlText struct {
	// The article's two statements and the decision path (tx strategy and
	// the shared slow path of every strategy).
	inboxInsert, inboxDelete        string
	inboxClaimGuarded               string
	accountUpdate, accountCreateV1  string
	accountLock, accountEnsure      string
	parkedExists, parkedCount       string
	parkInsert, parkedNext          string
	parkedDelete                    string
	idemClaim, idemGet, idemDelete  string
	snapshotUpsert                  string
	cte                             string
	batchEnsure, batchLock          string
	batchParked, batchInboxInsert   string
	batchInboxDelete, batchUpdate   string
	batchPark, batchParkedDelete    string
	inboxExists, brokenClaim        string
	brokenUnversioned, brokenAddAll string
	brokenForget                    string
	pruneBatch, stats, stuckParked  string
	drainCandidates                 string
	// Parking for strategy files, done by the harness around the file's
	// SQL (userpark.go).
	parkLock, accountVersion, parkedFirst string
	parkLockMany, parkedAmong             string
	// The external strategies' operation state and outbox (external.go).
	opClaim, opRead, opTakeOver, opStuck string
	opRelease, opDone                    string
	outboxInsert, outboxClaim            string
	outboxSent, outboxPending            string
}

func buildSQL(schema, account string) sqlText {
	r := strings.NewReplacer("{S}", schema, "{A}", account)
	s := func(q string) string { return r.Replace(q) }
	var t sqlText
	t.decision(s)
	t.parking(s)
	t.oneStatement(s)
	t.batch(s)
	t.broken(s)
	t.maintenance(s)
	t.external(s)
	return t
}

// decision fills the article's two statements and the shared decision
// path (tx and every strategy's slow path).
func (t *sqlText) decision(s func(string) string) {
	t.inboxInsert = s(`INSERT INTO {S}.inbox (consumer, source, event_id, aggregate_id, aggregate_version, event_time)
		VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING`)
	// Whether the inbox holds a key (the drain's DUPLICATE check; the
	// broken-split negative control's pre-check).
	t.inboxExists = s(`SELECT EXISTS (SELECT 1 FROM {S}.inbox WHERE consumer = $1 AND source = $2 AND event_id = $3)`)
	// With parking on, the claim is guarded: a redelivery of a parked
	// event must not claim its key (it would hold that row while waiting
	// for the account lock, while the predecessor's transaction, holding
	// that lock, drains the event and needs the same key: a deadlock).
	// It reports PARKED instead, taking no lock at all.
	t.inboxClaimGuarded = s(`WITH p AS (
			SELECT EXISTS (SELECT 1 FROM {S}.parked WHERE consumer = $1 AND source = $2 AND event_id = $3) AS parked
		), ins AS (
			INSERT INTO {S}.inbox (consumer, source, event_id, aggregate_id, aggregate_version, event_time)
			SELECT $1, $2, $3, $4, $5, $6::timestamptz FROM p WHERE NOT p.parked
			ON CONFLICT DO NOTHING RETURNING 1
		)
		SELECT (SELECT parked FROM p), EXISTS (SELECT 1 FROM ins)`)
	t.inboxDelete = s(`DELETE FROM {S}.inbox WHERE consumer = $1 AND source = $2 AND event_id = $3
		AND (event_time = $4 OR ($4::timestamptz IS NULL AND event_time IS NULL))`)
	// version = v-1 is the whole ordering rule; 0 rows is never success.
	t.accountUpdate = s(`UPDATE {A} SET balance = balance + $2, version = $3 WHERE id = $1 AND version = $3 - 1`)
	// A version-1 increment creates its account, or takes a pre-created
	// (id, 0, 0) row; the PK arbitrates two creators.
	t.accountCreateV1 = s(`INSERT INTO {A} AS a (id, balance, version) VALUES ($1, $2, 1)
		ON CONFLICT (id) DO UPDATE SET balance = a.balance + excluded.balance, version = 1 WHERE a.version = 0`)
	t.accountLock = s(`SELECT version FROM {A} WHERE id = $1 FOR UPDATE`)
	t.accountEnsure = s(`INSERT INTO {A} (id, balance, version) VALUES ($1, 0, 0) ON CONFLICT DO NOTHING`)
}

// parking fills parking, idempotency keys and snapshots.
func (t *sqlText) parking(s func(string) string) {
	t.parkedExists = s(`SELECT EXISTS (SELECT 1 FROM {S}.parked WHERE consumer = $1 AND aggregate_id = $2)`)
	t.parkedCount = s(`SELECT count(*), count(*) FILTER (WHERE source = $3 AND event_id = $4)
		FROM {S}.parked WHERE consumer = $1 AND aggregate_id = $2`)
	t.parkInsert = s(`INSERT INTO {S}.parked (consumer, source, event_id, aggregate_id, aggregate_version, kind, amount,
			type, event_time, idempotency_key, tenant, operation)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) ON CONFLICT DO NOTHING`)
	t.parkedNext = s(`SELECT source, event_id, aggregate_version, kind, amount, type, event_time, idempotency_key, tenant, operation
		FROM {S}.parked WHERE consumer = $1 AND aggregate_id = $2 AND aggregate_version <= $3
		ORDER BY aggregate_version, parked_at, source, event_id`)
	t.parkedDelete = s(`DELETE FROM {S}.parked WHERE consumer = $1 AND source = $2 AND event_id = $3`)
	// One lock per consumer and aggregate orders a park decision against
	// the drain check that follows the predecessor's commit.
	t.parkLock = s(`SELECT pg_advisory_xact_lock(hashtextextended('{S}/' || $1 || '/' || $2, 0))`)
	t.parkLockMany = s(`SELECT count(pg_advisory_xact_lock(hashtextextended('{S}/' || $1 || '/' || a, 0)))
		FROM (SELECT DISTINCT a FROM unnest($2::text[]) AS t(a) ORDER BY a) s`)
	t.parkedAmong = s(`SELECT DISTINCT aggregate_id FROM {S}.parked WHERE consumer = $1 AND aggregate_id = ANY ($2::text[])`)
	t.accountVersion = s(`SELECT version FROM {A} WHERE id = $1`)
	t.parkedFirst = s(`SELECT source, event_id, aggregate_version, kind, amount, type, event_time, idempotency_key, tenant, operation
		FROM {S}.parked WHERE consumer = $1 AND aggregate_id = $2 ORDER BY aggregate_version, parked_at, source, event_id LIMIT 1`)
	t.idemClaim = s(`INSERT INTO {S}.idempotency (tenant, operation, key, request_hash, result, consumer, source, event_id)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING`)
	t.idemDelete = s(`DELETE FROM {S}.idempotency
		WHERE tenant = $1 AND operation = $2 AND key = $3 AND source = $4 AND event_id = $5`)
	t.idemGet = s(`SELECT request_hash, result FROM {S}.idempotency WHERE tenant = $1 AND operation = $2 AND key = $3`)
	// Keep-latest: only a strictly newer snapshot overwrites.
	t.snapshotUpsert = s(`INSERT INTO {A} AS a (id, balance, version) VALUES ($1, $2, $3)
		ON CONFLICT (id) DO UPDATE SET balance = excluded.balance, version = excluded.version
		WHERE a.version < excluded.version`)
}

// oneStatement fills the cte strategy's one statement (also pipelined).
func (t *sqlText) oneStatement(s func(string) string) {
	// One statement, one round trip. p finds a redelivery of a parked
	// event (see inboxClaimGuarded); ins claims the inbox key (the PK
	// arbitrates); upd (v > 1) or cre (v = 1) applies only if the claim
	// succeeded; the final SELECT decides by which CTE returned a row.
	// When neither applied, inbox_not_applied raises IB001 so the whole
	// statement, claim included, rolls back: an inbox row never
	// outlives an effect that did not happen. After an apply,
	// inbox_parked_exists looks for parked successors with a fresh
	// snapshot (see the migration).
	t.cte = s(`WITH p AS (
			SELECT $7::boolean AND EXISTS (SELECT 1 FROM {S}.parked
				WHERE consumer = $1::text AND source = $2::text AND event_id = $3::text) AS parked
		), ins AS (
			INSERT INTO {S}.inbox (consumer, source, event_id, aggregate_id, aggregate_version, event_time)
			SELECT $1::text, $2::text, $3::text, $4::text, $5::bigint, $8::timestamptz FROM p WHERE NOT p.parked
			ON CONFLICT DO NOTHING
			RETURNING 1
		), upd AS (
			UPDATE {A} SET balance = balance + $6::bigint, version = $5::bigint
			WHERE id = $4::text AND version = $5::bigint - 1 AND $5::bigint > 1 AND EXISTS (SELECT 1 FROM ins)
			RETURNING 1
		), cre AS (
			INSERT INTO {A} AS a (id, balance, version)
			SELECT $4::text, $6::bigint, 1 WHERE $5::bigint = 1 AND EXISTS (SELECT 1 FROM ins)
			ON CONFLICT (id) DO UPDATE SET balance = a.balance + excluded.balance, version = 1 WHERE a.version = 0
			RETURNING 1
		)
		SELECT CASE
			WHEN (SELECT parked FROM p) THEN 'PARKED'
			WHEN NOT EXISTS (SELECT 1 FROM ins) THEN 'DUPLICATE'
			WHEN EXISTS (SELECT 1 FROM upd) OR EXISTS (SELECT 1 FROM cre) THEN 'APPLIED'
			ELSE {S}.inbox_not_applied($4::text, $5::bigint)
		END AS result,
		CASE
			WHEN $7::boolean AND (EXISTS (SELECT 1 FROM upd) OR EXISTS (SELECT 1 FROM cre))
			THEN {S}.inbox_parked_exists($1::text, $4::text)
			ELSE false
		END AS drain`)
}

// batch fills the batch strategy's set-based statements.
func (t *sqlText) batch(s func(string) string) {
	// Batch: accounts are created at (id, 0, 0) in id order in their own
	// short statement, so the transaction that follows only ever takes
	// row locks through one sorted SELECT … FOR UPDATE: two batches lock
	// their common aggregates in the same order and cannot deadlock.
	t.batchEnsure = s(`INSERT INTO {A} (id, balance, version)
		SELECT id, 0, 0 FROM unnest($1::text[]) AS t(id) ORDER BY id ON CONFLICT DO NOTHING`)
	// The ids come as a set to join, not as "id = ANY($1)": the account
	// table is small and bloats with every batch's updates, so its
	// generic plan sits near the tie between an index scan and a
	// sequential scan, and a sequential scan compares every row with
	// every element of a parameter array (PostgreSQL hashes only a
	// constant one): 5 ms instead of 0.3 ms for 1,000 accounts and a
	// 500-event batch. Which plan a connection got depended on the
	// table's size at the moment it planned, so whole cells ran 20-40%
	// slower at random (docs/strategy-files.md, "Plans that hold").
	// A semi-join is linear whichever way PostgreSQL runs it.
	t.batchLock = s(`SELECT id, version FROM {A} WHERE id IN (SELECT unnest($1::text[])) ORDER BY id FOR UPDATE`)
	t.batchParked = s(`SELECT aggregate_id, source, event_id, aggregate_version, kind, amount, type, event_time,
			idempotency_key, tenant, operation
		FROM {S}.parked WHERE consumer = $1 AND aggregate_id = ANY($2::text[])
		ORDER BY aggregate_id, aggregate_version, parked_at, source, event_id`)
	t.batchInboxInsert = s(`INSERT INTO {S}.inbox (consumer, source, event_id, aggregate_id, aggregate_version, event_time)
		SELECT $1, t.s, t.e, t.a, t.v, t.tm
		FROM unnest($2::text[], $3::text[], $4::text[], $5::bigint[], $6::timestamptz[]) AS t(s, e, a, v, tm)
		ON CONFLICT DO NOTHING RETURNING source, event_id`)
	t.batchInboxDelete = s(`DELETE FROM {S}.inbox i USING unnest($2::text[], $3::text[], $4::timestamptz[]) AS t(s, e, tm)
		WHERE i.consumer = $1 AND i.source = t.s AND i.event_id = t.e
			AND (i.event_time = t.tm OR (t.tm IS NULL AND i.event_time IS NULL))`)
	// One UPDATE for every aggregate of the batch; each row still carries
	// its version precondition, and the caller checks the row count.
	t.batchUpdate = s(`UPDATE {A} AS a SET balance = a.balance + d.delta, version = d.newv
		FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[]) AS d(id, delta, oldv, newv)
		WHERE a.id = d.id AND a.version = d.oldv`)
	t.batchPark = s(`INSERT INTO {S}.parked (consumer, source, event_id, aggregate_id, aggregate_version, kind, amount, type, event_time)
		SELECT $1, t.s, t.e, t.a, t.v, t.k, t.m, t.y, t.tm
		FROM unnest($2::text[], $3::text[], $4::text[], $5::bigint[], $6::text[], $7::bigint[], $8::text[], $9::timestamptz[])
			AS t(s, e, a, v, k, m, y, tm)
		ON CONFLICT DO NOTHING`)
	t.batchParkedDelete = s(`DELETE FROM {S}.parked p USING unnest($2::text[], $3::text[]) AS t(s, e)
		WHERE p.consumer = $1 AND p.source = t.s AND p.event_id = t.e`)
}

// broken fills the negative controls' mistakes.
func (t *sqlText) broken(s func(string) string) {
	t.brokenClaim = s(`INSERT INTO {S}.broken_claim (scope, claim_key) VALUES ($1, $2) ON CONFLICT DO NOTHING`)
	t.brokenForget = s(`DELETE FROM {S}.broken_claim WHERE scope = $1 AND claimed_at < clock_timestamp() - make_interval(secs => $2::bigint / 1e6)`)
	// Trusts the preceding SELECT alone: no version guard.
	t.brokenUnversioned = s(`INSERT INTO {A} AS a (id, balance, version) VALUES ($1, $2, $3)
		ON CONFLICT (id) DO UPDATE SET balance = a.balance + excluded.balance, version = GREATEST(a.version, excluded.version)`)
	// Ignores versions entirely: gaps and stale events are applied.
	t.brokenAddAll = s(`INSERT INTO {A} AS a (id, balance, version) VALUES ($1, $2, $3)
		ON CONFLICT (id) DO UPDATE SET balance = a.balance + excluded.balance, version = excluded.version`)
}

// maintenance fills retention, statistics and recovery.
func (t *sqlText) maintenance(s func(string) string) {
	// Plain layout only: a ctid is unique within one table, not across
	// the partitions of a partitioned one.
	t.pruneBatch = s(`DELETE FROM {S}.inbox WHERE ctid = ANY (ARRAY(
		SELECT ctid FROM {S}.inbox WHERE applied_at < $1 ORDER BY applied_at LIMIT $2))`)
	// A partitioned parent has no storage of its own: add its partitions
	// (pg_partition_tree lists none for a plain table).
	t.stats = s(`SELECT (SELECT count(*) FROM {S}.inbox),
		pg_total_relation_size('{S}.inbox'::regclass) + coalesce((SELECT sum(pg_total_relation_size(relid))
			FROM pg_partition_tree('{S}.inbox'::regclass) WHERE level > 0), 0)::bigint,
		(SELECT min(applied_at) FROM {S}.inbox),
		(SELECT count(*) FROM {S}.parked),
		(SELECT min(parked_at) FROM {S}.parked),
		(SELECT count(*) FROM {S}.idempotency)`)
	t.stuckParked = s(`SELECT consumer, source, event_id, aggregate_id, aggregate_version, kind, amount, parked_at
		FROM {S}.parked WHERE parked_at < now() - $1::interval
		ORDER BY parked_at, consumer, aggregate_id, aggregate_version LIMIT $2`)
	t.drainCandidates = s(`SELECT DISTINCT aggregate_id FROM {S}.parked WHERE consumer = $1 ORDER BY aggregate_id`)
}
