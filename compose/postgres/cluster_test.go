package postgres

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxbench/inboxbench/compose/internal/stacktest"
	"github.com/inboxbench/inboxbench/internal/testenv/core"
)

// TestReplicatedPostgresCluster: one primary, one standby streaming
// synchronously from it; the endpoint reaches the primary; a committed
// row is on the standby when COMMIT returns (synchronous_commit=on with a
// synchronous standby waits for its flush; it is read there once
// replayed).
func TestReplicatedPostgresCluster(t *testing.T) {
	e := stacktest.ReplicatedEnv(t, core.Postgres)
	c := &Cluster{}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	roles := map[string]string{}
	for _, n := range c.NodeStatus(ctx, e) {
		if !n.Healthy {
			t.Errorf("%s is not healthy: %s", n.Name, n.Detail)
		}
		roles[n.Role] = n.Name
		if n.Role == "primary" && !strings.Contains(n.Detail, "(sync)") {
			t.Errorf("the primary %s has no synchronous standby: %s", n.Name, n.Detail)
		}
	}
	if roles["primary"] == "" || roles["standby"] == "" {
		t.Fatalf("roles %v, want a primary and a standby", roles)
	}
	ls, err := c.Leaders(ctx, e, "")
	if err != nil || len(ls) != 1 || ls[0].Name != roles["primary"] {
		t.Fatalf("Leaders = %v, %v; want the primary %s", ls, err, roles["primary"])
	}
	conn, err := pgx.Connect(ctx, e.Cfg.PGURL)
	if err != nil {
		t.Fatalf("connect with the endpoint %s: %v", e.Cfg.PGURL, err)
	}
	defer conn.Close(context.Background())
	var port int
	if err := conn.QueryRow(ctx, "SELECT inet_server_port()").Scan(&port); err != nil || ls[0].Addr != fmt.Sprintf("127.0.0.1:%d", port) {
		t.Errorf("the endpoint reached port %d (%v), want the primary %s", port, err, ls[0].Addr)
	}
	table := fmt.Sprintf("replicated_test_%d", time.Now().UnixNano())
	if _, err := conn.Exec(ctx, "CREATE TABLE "+table+" (v int); INSERT INTO "+table+" VALUES (42)"); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(context.Background(), "DROP TABLE "+table) //nolint:errcheck
	standby := pgClusterNodes[0]
	if roles["standby"] == pgClusterNodes[1].name {
		standby = pgClusterNodes[1]
	}
	sconn, err := pgx.Connect(ctx, fmt.Sprintf("host=%s port=%d user=%s dbname=%s sslmode=disable", filepath.Join(c.dir(e, standby), "run"), standby.port, pgSuperuser, pgAppDB))
	if err != nil {
		t.Fatal(err)
	}
	defer sconn.Close(context.Background())
	var v int
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if err = sconn.QueryRow(ctx, "SELECT v FROM "+table).Scan(&v); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil || v != 42 {
		t.Errorf("the committed row on the standby: %d, %v", v, err)
	}
}
