package rocketmq

// The consumer-group side of RocketMQ's remoting protocol that the
// orderly consumer (subscription.go) speaks itself: heartbeats, the
// group's member list, queue locks, consumer offsets and long-polling
// pulls. Request codes and field names are those of
// org.apache.rocketmq.remoting.protocol (RequestCode, ResponseCode and
// the request headers).

import (
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
)

// Request and response codes.
const (
	rmqPullMessage         = 11
	rmqQueryConsumerOffset = 14
	rmqUpdateConsumerOff   = 15
	rmqHeartbeat           = 34
	rmqUnregisterClient    = 35
	rmqGetConsumerList     = 38
	rmqNotifyIDsChanged    = 40
	rmqLockBatchMQ         = 41
	rmqUnlockBatchMQ       = 42

	resPullNotFound         = 19
	resPullRetryImmediately = 20
	resPullOffsetMoved      = 21
	resQueryNotFound        = 22
)

// Pull request flags (PullSysFlag).
const (
	pullFlagSuspend      = 2
	pullFlagSubscription = 4
)

// queue is one message queue of a topic.
type queue struct {
	Topic      string `json:"topic"`
	BrokerName string `json:"brokerName"`
	QueueID    int    `json:"queueId"`
}

// String is "<broker>:<queue id>", as Delivery.Shard and the logs show it.
func (q queue) String() string { return q.BrokerName + ":" + strconv.Itoa(q.QueueID) }

// topicRoute is what the name server says about a topic: its read
// queues and its write queues (each sorted by broker name, then id, on
// brokers with a master) and each broker's master address.
type topicRoute struct {
	queues  []queue
	writes  []queue
	masters map[string]string // broker name → address
}

// fetchRoute asks the name servers, in turn, for topic's route. A topic
// no name server routes is an error from each (TOPIC_NOT_EXIST).
func (r *Remoting) fetchRoute(ctx context.Context, namesrvs []string, topic string) (*topicRoute, error) {
	var errs []error
	for _, ns := range namesrvs {
		body, err := r.call(ctx, ns, request{rmqGetRouteInfoByTopic, map[string]string{"topic": topic}, nil})
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", ns, err))
			continue
		}
		var raw struct {
			QueueDatas []struct {
				BrokerName     string `json:"brokerName"`
				ReadQueueNums  int    `json:"readQueueNums"`
				WriteQueueNums int    `json:"writeQueueNums"`
				Perm           int    `json:"perm"`
			} `json:"queueDatas"`
			BrokerDatas []struct {
				BrokerName  string            `json:"brokerName"`
				BrokerAddrs map[string]string `json:"brokerAddrs"`
			} `json:"brokerDatas"`
		}
		if err := json.Unmarshal(FastJSONToJSON(body), &raw); err != nil {
			errs = append(errs, fmt.Errorf("%s: route of %s: %w", ns, topic, err))
			continue
		}
		rt := &topicRoute{masters: map[string]string{}}
		for _, bd := range raw.BrokerDatas {
			if a := bd.BrokerAddrs["0"]; a != "" {
				rt.masters[bd.BrokerName] = a
			}
		}
		for _, qd := range raw.QueueDatas {
			if rt.masters[qd.BrokerName] == "" {
				continue // no master: nothing to lock, pull or send there
			}
			for i := range qd.ReadQueueNums {
				rt.queues = append(rt.queues, queue{Topic: topic, BrokerName: qd.BrokerName, QueueID: i})
			}
			if qd.Perm&permWrite != 0 {
				for i := range qd.WriteQueueNums {
					rt.writes = append(rt.writes, queue{Topic: topic, BrokerName: qd.BrokerName, QueueID: i})
				}
			}
		}
		sortQueues(rt.queues)
		sortQueues(rt.writes)
		if len(rt.queues) == 0 {
			errs = append(errs, fmt.Errorf("%s: topic %s has no readable queue on a master broker", ns, topic))
			continue
		}
		return rt, nil
	}
	return nil, errors.Join(errs...)
}

// permWrite is PermName.PERM_WRITE of a queue's perm.
const permWrite = 2

func sortQueues(qs []queue) {
	sort.Slice(qs, func(i, j int) bool {
		a, b := qs[i], qs[j]
		if a.BrokerName != b.BrokerName {
			return a.BrokerName < b.BrokerName
		}
		return a.QueueID < b.QueueID
	})
}

// allocate gives member me its share of queues (sorted) among members
// (any order): contiguous ranges, the first len(queues)%len(members)
// members one more — the same split as RocketMQ's
// AllocateMessageQueueAveragely, so every member computes the same.
func allocate(queues []queue, members []string, me string) []queue {
	ms := append([]string(nil), members...)
	sort.Strings(ms)
	idx := sort.SearchStrings(ms, me)
	if idx == len(ms) || ms[idx] != me || len(queues) == 0 {
		return nil
	}
	n, c := len(queues), len(ms)
	size := n / c
	start := idx*size + min(idx, n%c)
	if idx < n%c {
		size++
	}
	return queues[start : start+size]
}

// groupClient speaks for one consumer (clientID) of a group, with one
// connection per broker address (a pool).
type groupClient struct {
	*pool
	group    string
	clientID string
	onNotify func() // the broker says the group's membership changed
}

func newGroupClient(r *Remoting, group, clientID string, onNotify func()) *groupClient {
	g := &groupClient{group: group, clientID: clientID, onNotify: onNotify}
	g.pool = newPool(r, func(code int, ext map[string]string) {
		if code == rmqNotifyIDsChanged && ext["consumerGroup"] == g.group {
			g.onNotify()
		}
	})
	return g
}

// heartbeat registers the consumer and its subscription of topic with
// the broker at addr (which then lists it among the group's members).
func (g *groupClient) heartbeat(ctx context.Context, addr, topic string, subVersion int64) error {
	type sub struct {
		ClassFilterMode bool     `json:"classFilterMode"`
		Topic           string   `json:"topic"`
		SubString       string   `json:"subString"`
		TagsSet         []string `json:"tagsSet"`
		CodeSet         []int    `json:"codeSet"`
		SubVersion      int64    `json:"subVersion"`
		ExpressionType  string   `json:"expressionType"`
	}
	type consumerData struct {
		GroupName           string `json:"groupName"`
		ConsumeType         string `json:"consumeType"`
		MessageModel        string `json:"messageModel"`
		ConsumeFromWhere    string `json:"consumeFromWhere"`
		SubscriptionDataSet []sub  `json:"subscriptionDataSet"`
		UnitMode            bool   `json:"unitMode"`
	}
	body, err := json.Marshal(struct {
		ClientID        string         `json:"clientID"`
		ProducerDataSet []struct{}     `json:"producerDataSet"`
		ConsumerDataSet []consumerData `json:"consumerDataSet"`
	}{
		ClientID:        g.clientID,
		ProducerDataSet: []struct{}{},
		ConsumerDataSet: []consumerData{{
			GroupName: g.group, ConsumeType: "CONSUME_PASSIVELY", MessageModel: "CLUSTERING",
			ConsumeFromWhere: "CONSUME_FROM_FIRST_OFFSET",
			SubscriptionDataSet: []sub{{Topic: topic, SubString: "*", TagsSet: []string{}, CodeSet: []int{},
				SubVersion: subVersion, ExpressionType: "TAG"}},
		}},
	})
	if err != nil {
		return err
	}
	_, err = g.call(ctx, addr, request{rmqHeartbeat, nil, body})
	return err
}

// unregister tells the broker the consumer left, so the other members
// rebalance at once instead of after the broker's channel timeout.
func (g *groupClient) unregister(ctx context.Context, addr string) error {
	_, err := g.call(ctx, addr, request{rmqUnregisterClient, map[string]string{"clientID": g.clientID, "consumerGroup": g.group}, nil})
	return err
}

// members lists the client ids of the group's consumers known to addr.
func (g *groupClient) members(ctx context.Context, addr string) ([]string, error) {
	f, err := g.call(ctx, addr, request{rmqGetConsumerList, map[string]string{"consumerGroup": g.group}, nil})
	if err != nil {
		return nil, err
	}
	var out struct {
		ConsumerIDList []string `json:"consumerIdList"`
	}
	if err := json.Unmarshal(FastJSONToJSON(f.body), &out); err != nil {
		return nil, fmt.Errorf("consumer list of %s: %w", g.group, err)
	}
	return out.ConsumerIDList, nil
}

// lock locks (or renews) qs on the broker at addr for this consumer and
// returns those it holds now.
func (g *groupClient) lock(ctx context.Context, addr string, qs []queue) ([]queue, error) {
	body, err := g.queueSet(qs)
	if err != nil {
		return nil, err
	}
	f, err := g.call(ctx, addr, request{rmqLockBatchMQ, nil, body})
	if err != nil {
		return nil, err
	}
	var out struct {
		LockOKMQSet []queue `json:"lockOKMQSet"`
	}
	if err := json.Unmarshal(FastJSONToJSON(f.body), &out); err != nil {
		return nil, fmt.Errorf("lock answer: %w", err)
	}
	return out.LockOKMQSet, nil
}

// unlock releases this consumer's locks of qs on the broker at addr.
func (g *groupClient) unlock(ctx context.Context, addr string, qs []queue) error {
	body, err := g.queueSet(qs)
	if err != nil {
		return err
	}
	_, err = g.call(ctx, addr, request{rmqUnlockBatchMQ, nil, body})
	return err
}

// queueSet is the body of a lock or unlock request of qs for this
// consumer.
func (g *groupClient) queueSet(qs []queue) ([]byte, error) {
	return json.Marshal(struct {
		ConsumerGroup string  `json:"consumerGroup"`
		ClientID      string  `json:"clientId"`
		MQSet         []queue `json:"mqSet"`
	}{g.group, g.clientID, qs})
}

func (g *groupClient) queueExt(q queue) map[string]string {
	return map[string]string{"consumerGroup": g.group, "topic": q.Topic, "queueId": strconv.Itoa(q.QueueID), "bname": q.BrokerName}
}

// offset returns the group's committed offset of q; a group that never
// committed one starts at 0, the first offset (the broker moves a pull
// below its minimum up to it).
func (g *groupClient) offset(ctx context.Context, addr string, q queue) (int64, error) {
	f, err := g.call(ctx, addr, request{rmqQueryConsumerOffset, g.queueExt(q), nil}, resQueryNotFound)
	if err != nil {
		return 0, err
	}
	if f.Code == resQueryNotFound {
		return 0, nil
	}
	return strconv.ParseInt(f.ExtFields["offset"], 10, 64)
}

func (g *groupClient) commit(ctx context.Context, addr string, q queue, offset int64) error {
	ext := g.queueExt(q)
	ext["commitOffset"] = strconv.FormatInt(offset, 10)
	_, err := g.call(ctx, addr, request{rmqUpdateConsumerOff, ext, nil})
	return err
}

// pulled is a pull's outcome: the messages found (possibly none) and the
// offset to pull from next.
type pulled struct {
	msgs  []*primitive.MessageExt
	next  int64
	moved bool // the offset asked for is out of the queue's range
}

// pullRequest asks for up to max messages of q from offset on; with
// nothing new the broker holds it for up to hold.
type pullRequest struct {
	q      queue
	offset int64
	max    int
	hold   time.Duration
}

// pull sends pr to the broker at addr, which answers as soon as a message
// arrives (long polling); ctx must outlast pr.hold.
func (g *groupClient) pull(ctx context.Context, addr string, pr pullRequest) (pulled, error) {
	ext := g.queueExt(pr.q)
	ext["queueOffset"] = strconv.FormatInt(pr.offset, 10)
	ext["maxMsgNums"] = strconv.Itoa(pr.max)
	ext["sysFlag"] = strconv.Itoa(pullFlagSuspend | pullFlagSubscription)
	ext["commitOffset"] = "0"
	ext["suspendTimeoutMillis"] = strconv.FormatInt(pr.hold.Milliseconds(), 10)
	ext["subscription"] = "*"
	ext["subVersion"] = "0"
	ext["expressionType"] = "TAG"
	f, err := g.call(ctx, addr, request{rmqPullMessage, ext, nil}, resPullNotFound, resPullRetryImmediately, resPullOffsetMoved)
	if err != nil {
		return pulled{}, err
	}
	next, err := strconv.ParseInt(f.ExtFields["nextBeginOffset"], 10, 64)
	if err != nil {
		return pulled{}, fmt.Errorf("pull %s: no nextBeginOffset in the answer (code %d): %w", pr.q, f.Code, err)
	}
	out := pulled{next: next, moved: f.Code == resPullOffsetMoved}
	if f.Code == 0 && len(f.body) > 0 {
		out.msgs = primitive.DecodeMessage(f.body)
	}
	return out, nil
}

// signed returns ext with the ACL fields of RocketMQ's remoting protocol
// when creds has an access key (else ext as it is), as the client
// library's producer and admin sign theirs: Signature is the base64
// HMAC-SHA1, keyed by the secret key, of the values of every field
// (AccessKey included) in the order of their names, followed by body.
func signed(creds primitive.Credentials, ext map[string]string, body []byte) map[string]string {
	if creds.AccessKey == "" {
		return ext
	}
	out := make(map[string]string, len(ext)+3)
	for k, v := range ext {
		out[k] = v
	}
	out["AccessKey"] = creds.AccessKey
	mac := hmac.New(sha1.New, []byte(creds.SecretKey))
	for _, k := range slices.Sorted(maps.Keys(out)) {
		mac.Write([]byte(out[k]))
	}
	mac.Write(body)
	out["Signature"] = base64.StdEncoding.EncodeToString(mac.Sum(nil))
	if creds.SecurityToken != "" {
		out["SecurityToken"] = creds.SecurityToken // sent, not signed, as the library does
	}
	return out
}
