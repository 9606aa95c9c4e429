package rocketmq

import (
	"errors"
	"strings"
	"testing"

	"github.com/inboxbench/inboxbench/config"
)

// TestExplainNoPermission: the broker's NO_PERMISSION answers are told
// apart: a broker whose own permission forbids pulling (a failover
// control makes the master write-only) names no access setting, while a
// user's missing permission names rocketmq.access-key.
func TestExplainNoPermission(t *testing.T) {
	cfg := config.Config{}
	forbidden := &RemotingError{Code: resNoPermission, Remark: "the broker[127.0.0.1] pulling message is forbidden"}
	err := Explain(cfg, forbidden, false)
	var se *config.SettingError
	if errors.As(err, &se) || !strings.Contains(err.Error(), "brokerPermission") || !errors.As(err, new(*RemotingError)) {
		t.Errorf("a write-only broker's refusal: %v, want the broker's permission named and no setting blamed", err)
	}
	denied := &RemotingError{Code: resNoPermission, Remark: "user:app has no permission to access topic"}
	if err := Explain(cfg, denied, false); !errors.As(err, &se) {
		t.Errorf("a user's missing permission: %v, want a setting error", err)
	}
}
