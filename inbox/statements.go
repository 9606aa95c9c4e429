package inbox

import (
	"fmt"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
)

// statementNames are the names Statement knows.
var statementNames = []string{"inbox-claim", "inbox-claim-guarded", "account-create-v1", "account-update", "parked-exists",
	"batch-lock", "batch-parked", "batch-inbox-insert", "batch-update"}

// Statement returns one of the SQL texts the built-in strategies send,
// for schema and its account table, by name, so a tool outside this
// package (the pgbench twins of package dbcalib) runs exactly the same
// statements rather than a copy that drifts. Parameters are $1, $2 … as
// listed here:
//
//	inbox-claim           $1 consumer, $2 source, $3 event id, $4 aggregate, $5 version, $6 event time
//	inbox-claim-guarded   the same parameters; returns (parked, claimed)
//	account-create-v1     $1 aggregate, $2 amount
//	account-update        $1 aggregate, $2 amount, $3 version
//	parked-exists         $1 consumer, $2 aggregate
//	batch-lock            $1 aggregates (text[])
//	batch-parked          $1 consumer, $2 aggregates (text[])
//	batch-inbox-insert    $1 consumer, $2 sources, $3 event ids, $4 aggregates (text[]), $5 versions (bigint[]), $6 event times (timestamptz[])
//	batch-update          $1 aggregates (text[]), $2 deltas, $3 old versions, $4 new versions (bigint[])
//
// tx sends inbox-claim-guarded (inbox-claim with parking off), then
// account-create-v1 for version 1 or account-update, then, with parking
// on, parked-exists. batch sends batch-lock, batch-parked (parking on) and
// batch-inbox-insert in one pipeline, then batch-update.
func Statement(schema, name string) (string, error) {
	if err := ValidateSchema(schema); err != nil {
		return "", err
	}
	t := buildSQL(pgx.Identifier{schema}.Sanitize(), pgx.Identifier{schema, "account"}.Sanitize())
	m := map[string]string{
		"inbox-claim": t.inboxInsert, "inbox-claim-guarded": t.inboxClaimGuarded,
		"account-create-v1": t.accountCreateV1, "account-update": t.accountUpdate, "parked-exists": t.parkedExists,
		"batch-lock": t.batchLock, "batch-parked": t.batchParked, "batch-inbox-insert": t.batchInboxInsert,
		"batch-update": t.batchUpdate,
	}
	q, ok := m[name]
	if !ok {
		names := append([]string(nil), statementNames...)
		sort.Strings(names)
		return "", fmt.Errorf("inbox: no statement %q: known are %s", name, strings.Join(names, ", "))
	}
	return q, nil
}
