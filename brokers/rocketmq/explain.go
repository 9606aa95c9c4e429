package rocketmq

import (
	"errors"
	"fmt"
	"strings"

	"github.com/inboxbench/inboxbench/brokers/internal/driverutil"
	"github.com/inboxbench/inboxbench/config"
)

// resNoPermission is ResponseCode.NO_PERMISSION: what a broker answers a
// request that fails authentication or authorization (RocketMQ 5's
// AuthenticationPipeline and AuthorizationPipeline, 4.x's plain ACL).
const resNoPermission = 16

// Explain turns what a server answers when it refuses cfg's connection
// settings into an error naming the setting to change and what to do,
// keeping the server's words: a failed TLS handshake, a plaintext client
// hung up on by a TLS-enforcing server (overTLS: whether the client
// spoke TLS), an unknown user or a bad signature, a missing permission.
// Any other error comes back unchanged. None of these is retried.
func Explain(cfg config.Config, err error, overTLS bool) error {
	if done, e := driverutil.Explained(cfg, err, tlsKeys); done {
		return e
	}
	var closed *closedError
	if errors.As(err, &closed) && !overTLS {
		return config.Invalid(SettingTLS, nil, "%v: a server with tls.server.mode=enforcing does that to a plaintext client, so set it (with %s)", err, SettingCAFile)
	}
	var re *RemotingError
	if !errors.As(err, &re) || re.Code != resNoPermission {
		return err
	}
	user := cfg.Get(SettingAccessKey)
	remark := strings.ToLower(re.Remark)
	switch {
	case strings.Contains(remark, "is forbidden"):
		// "the broker[…] pulling message is forbidden": the broker's own
		// brokerPermission (read-only, write-only, or drained by an
		// operator), not the user's: no access setting would change it.
		return fmt.Errorf("%w: the broker's brokerPermission forbids it for now (a broker made read-only or write-only); the client retries", err)
	case user == "" && (strings.Contains(remark, "username cannot be null") || strings.Contains(remark, "accesskey")):
		return config.Invalid(SettingAccessKey, nil, "the broker requires authentication and the request was not signed (%v): set %s and %s", err, SettingAccessKey, SettingSecretKey)
	case strings.Contains(remark, "is not found"), strings.Contains(remark, "is disabled"):
		return config.Invalid(SettingAccessKey, nil, "the broker knows no enabled user %q (%v): create it (mqadmin createUser) or use one it has", user, err)
	case strings.Contains(remark, "signature"):
		return config.Invalid(SettingSecretKey, nil, "the broker refused the signature of user %q (%v): the secret key is not that user's password", user, err)
	case strings.Contains(remark, "no permission"), strings.Contains(remark, "deny"):
		return config.Invalid(SettingAccessKey, nil, "user %q lacks a permission (%v): the suite creates and deletes its topics, publishes, subscribes and commits offsets, so grant it Create, Delete, Pub, Sub, Get and Update on its topics and groups (mqadmin createAcl), or use a user that has them", user, err)
	}
	return config.Invalid(SettingAccessKey, nil, "the broker refused the request of user %q (%v)", user, err)
}
