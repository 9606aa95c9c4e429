package runner

import (
	"context"

	"github.com/inboxbench/inboxbench/inbox"
)

// cellAudit is how a cell's audit log is captured (inbox/audit.go):
// triggers installed before the stream, or a logical decoding slot read
// after it.
type cellAudit struct {
	mode inbox.AuditMode
	wal  *inbox.WALAudit
}

// startAudit resolves the run's audit mode for this cell's server and
// sets it up before anything is published.
func (c *cell) startAudit(ctx context.Context) (*cellAudit, error) {
	a := &cellAudit{mode: inbox.AuditOff}
	if !c.o.Measure.Audit {
		return a, nil
	}
	a.mode = inbox.ResolveAudit(ctx, c.pool, c.o.Measure.AuditMode)
	if a.mode != inbox.AuditWAL {
		return a, inbox.InstallAudit(ctx, c.pool, c.id, a.mode)
	}
	var err error
	a.wal, err = inbox.StartWALAudit(ctx, c.o.Cfg.PGURL, c.id)
	return a, err
}

// finish completes the log once every write of the cell committed: the
// slot's changes are decoded into it.
func (a *cellAudit) finish(ctx context.Context) error {
	if a.wal == nil {
		return nil
	}
	w := a.wal
	a.wal = nil
	return w.Finish(ctx)
}

// flush brings the log up to date with what committed so far (a trigger
// log always is; a slot's changes are decoded).
func (a *cellAudit) flush(ctx context.Context) error {
	if a.wal == nil {
		return nil
	}
	return a.wal.Flush(ctx)
}

// close releases a slot that was not decoded (the cell ended early).
func (a *cellAudit) close(ctx context.Context) {
	if a.wal != nil {
		a.wal.Close(ctx)
	}
}
