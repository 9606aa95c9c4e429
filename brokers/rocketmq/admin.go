package rocketmq

// The admin requests the driver and the local stack send themselves,
// signed and over the configured TLS (Remoting): topics, and RocketMQ 5's
// users and ACLs. The client library's admin client sends its requests
// unsigned unless the client was started (its ACL hook is registered by
// Start, which an admin client never calls), and ignores the code of the
// answer to a topic creation, so a broker with authentication refused
// the creation and the driver then waited for a route that never came.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// Request codes (org.apache.rocketmq.remoting.protocol.RequestCode).
const (
	rmqUpdateAndCreateTopic = 17
	rmqDeleteTopicInBroker  = 215
	rmqDeleteTopicInNamesrv = 216
	rmqAuthCreateUser       = 3001
	rmqAuthUpdateUser       = 3002
	rmqAuthGetUser          = 3004
	rmqAuthCreateACL        = 3006
)

// CreateTopic creates topic on the broker at addr with n read and write
// queues, readable and writable (UPDATE_AND_CREATE_TOPIC: a topic that
// exists takes the new queue counts).
func (r *Remoting) CreateTopic(ctx context.Context, addr, topic string, n int) error {
	_, err := r.call(ctx, addr, request{rmqUpdateAndCreateTopic, map[string]string{
		"topic": topic, "defaultTopic": "TBW102",
		"readQueueNums": strconv.Itoa(n), "writeQueueNums": strconv.Itoa(n),
		"perm": "6", "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false",
	}, nil})
	if err != nil {
		return fmt.Errorf("create topic %s on broker %s: %w", topic, addr, err)
	}
	return nil
}

// DeleteTopic deletes topic on each broker, then from each name server's
// routes.
func (r *Remoting) DeleteTopic(ctx context.Context, brokers, namesrvs []string, topic string) error {
	for _, a := range brokers {
		if _, err := r.call(ctx, a, request{rmqDeleteTopicInBroker, map[string]string{"topic": topic}, nil}); err != nil {
			return fmt.Errorf("delete topic %s on broker %s: %w", topic, a, err)
		}
	}
	var errs []error
	for _, ns := range namesrvs {
		if _, err := r.call(ctx, ns, request{rmqDeleteTopicInNamesrv, map[string]string{"topic": topic}, nil}); err != nil {
			errs = append(errs, fmt.Errorf("delete topic %s on name server %s: %w", topic, ns, err))
		}
	}
	return errors.Join(errs...)
}

// EnsureUser creates a normal (not super) user on the broker at addr, or
// sets its password when it exists (RocketMQ 5 authentication; the
// caller must be a super user).
func (r *Remoting) EnsureUser(ctx context.Context, addr, name, password string) error {
	body, err := r.call(ctx, addr, request{rmqAuthGetUser, map[string]string{"username": name}, nil})
	if err != nil {
		return fmt.Errorf("get user %s on broker %s: %w", name, addr, err)
	}
	code := rmqAuthCreateUser
	if len(body) > 0 && string(body) != "null" {
		code = rmqAuthUpdateUser
	}
	info, err := json.Marshal(map[string]string{"username": name, "password": password, "userType": "Normal", "userStatus": "enable"})
	if err != nil {
		return err
	}
	if _, err := r.call(ctx, addr, request{code, map[string]string{"username": name}, info}); err != nil {
		return fmt.Errorf("create user %s on broker %s: %w", name, addr, err)
	}
	return nil
}

// Grant is one entry of an ACL: actions (Pub, Sub, Create, Update,
// Delete, Get, List, All) allowed on resources ("Topic:*",
// "Group:ib-*", "Cluster:DefaultCluster"), from sourceIPs (none: any).
type Grant struct {
	Resource  string
	Actions   []string
	SourceIPs []string
}

// GrantACL adds the grants to subject's ACL ("User:NAME") on the broker
// at addr (CREATE_ACL merges them into an ACL that exists).
func (r *Remoting) GrantACL(ctx context.Context, addr, subject string, grants ...Grant) error {
	type entry struct {
		Resource  string   `json:"resource"`
		Actions   []string `json:"actions"`
		SourceIPs []string `json:"sourceIps,omitempty"`
		Decision  string   `json:"decision"`
	}
	var entries []entry
	for _, g := range grants {
		entries = append(entries, entry{Resource: g.Resource, Actions: g.Actions, SourceIPs: g.SourceIPs, Decision: "Allow"})
	}
	body, err := json.Marshal(map[string]any{"subject": subject,
		"policies": []map[string]any{{"policyType": "Custom", "entries": entries}}})
	if err != nil {
		return err
	}
	if _, err := r.call(ctx, addr, request{rmqAuthCreateACL, map[string]string{"subject": subject}, body}); err != nil {
		return fmt.Errorf("grant %s on broker %s: %w", subject, addr, err)
	}
	return nil
}
