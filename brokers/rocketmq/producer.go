package rocketmq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"

	"github.com/inboxbench/inboxbench/config"
)

// Request and response codes of sending.
const (
	rmqSendMessage      = 10
	rmqSendBatchMessage = 320

	resFlushDiskTimeout  = 10
	resSlaveNotAvailable = 11
	resFlushSlaveTimeout = 12
	resSystemBusy        = 2
)

// producerGroup is the producer group every send names (the broker keeps
// producer groups for transactions only, which the driver does not use).
const producerGroup = "inboxbench-producer"

// sendAttempts is how often a send is tried before its error is the
// send's (as the client library's producer did with its two retries): a
// connection lost to a broker restart is dialled again for the next. A
// refusal of the connection settings (TLS, signature, permission) is not
// tried again.
const sendAttempts = 3

// remotingProducer sends messages over the driver's own connections, one
// per broker (Remoting: TLS as configured, every request signed), with
// the request the client library's producer sends: SEND_MESSAGE for one
// message, SEND_BATCH_MESSAGE (the compact V2 header) for several of one
// queue, the batch encoded by the library (producer.MarshalMessageBatch).
// Bodies go uncompressed.
type remotingProducer struct {
	b    *Broker
	pool *pool
}

var _ producerAPI = (*remotingProducer)(nil)

func newRemotingProducer(b *Broker) *remotingProducer {
	return &remotingProducer{b: b, pool: newPool(b.rm, nil)}
}

// SendSync sends msgs (one topic; several only to one chosen queue) in one
// request to the queue's master broker and returns the broker's answer: a
// flush or slave timeout is a result with that status, any other refusal
// an error (SYSTEM_BUSY as a *RemotingError with code 2).
func (p *remotingProducer) SendSync(ctx context.Context, msgs ...*primitive.Message) (*primitive.SendResult, error) {
	if len(msgs) == 0 {
		return nil, errors.New("nothing to send")
	}
	m0 := msgs[0]
	mq := m0.Queue
	if mq == nil {
		mqs, err := p.b.publishQueues(ctx, m0.Topic)
		if err != nil {
			return nil, err
		}
		mq = queueSelector{}.Select(m0, mqs, "")
	} else if len(msgs) > 1 {
		for _, m := range msgs[1:] {
			if m.Topic != m0.Topic {
				return nil, fmt.Errorf("a batch goes to one topic: %s and %s", m0.Topic, m.Topic)
			}
		}
	}
	var err error
	for range sendAttempts {
		var res *primitive.SendResult
		res, err = p.sendOnce(ctx, mq, msgs)
		var se *config.SettingError
		var re *RemotingError
		if err != nil && ctx.Err() == nil && !errors.As(err, &se) && (!errors.As(err, &re) || re.Code != resSystemBusy) {
			// The master named by the cached route is gone, or is no
			// master any more (controller mode switched it: a demoted
			// one refuses sends): the next attempt, and the caller's,
			// go by a fresh route instead of the cached one.
			_, _ = p.b.publishRoute(ctx, mq.Topic, true)
		}
		if err == nil || ctx.Err() != nil || errors.As(err, &se) || errors.As(err, &re) {
			return res, err
		}
	}
	return nil, err
}

func (p *remotingProducer) sendOnce(ctx context.Context, mq *primitive.MessageQueue, msgs []*primitive.Message) (*primitive.SendResult, error) {
	ctx, cancel := context.WithTimeout(ctx, p.b.sendTimeout)
	defer cancel()
	addr, err := p.b.masterOf(ctx, mq.Topic, mq.BrokerName)
	if err != nil {
		return nil, err
	}
	m0 := msgs[0]
	code, body, props, batch := rmqSendMessage, m0.Body, "", len(msgs) > 1
	if batch {
		code, body = rmqSendBatchMessage, producer.MarshalMessageBatch(msgs...)
	} else {
		if m0.GetProperty(primitive.PropertyUniqueClientMessageIdKeyIndex) == "" {
			m0.WithProperty(primitive.PropertyUniqueClientMessageIdKeyIndex, primitive.CreateUniqID())
		}
		props = m0.MarshallProperties()
	}
	born := strconv.FormatInt(time.Now().UnixMilli(), 10)
	var ext map[string]string
	if batch { // SendMessageRequestHeaderV2's one-letter fields
		ext = map[string]string{"a": producerGroup, "b": mq.Topic, "c": "TBW102", "d": "4", "e": strconv.Itoa(mq.QueueId),
			"f": "0", "g": born, "h": "0", "i": props, "j": "0", "k": "false", "l": "0", "m": "true", "n": mq.BrokerName}
	} else {
		ext = map[string]string{"producerGroup": producerGroup, "topic": mq.Topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
			"queueId": strconv.Itoa(mq.QueueId), "sysFlag": "0", "bornTimestamp": born, "flag": strconv.Itoa(int(m0.Flag)),
			"properties": props, "reconsumeTimes": "0", "unitMode": "false", "maxReconsumeTimes": "0", "batch": "false", "bname": mq.BrokerName}
	}
	f, err := p.pool.call(ctx, addr, request{code, ext, body}, resFlushDiskTimeout, resSlaveNotAvailable, resFlushSlaveTimeout)
	if err != nil {
		return nil, err
	}
	res := &primitive.SendResult{Status: primitive.SendOK, OffsetMsgID: f.ExtFields["msgId"], MessageQueue: mq}
	switch f.Code {
	case resFlushDiskTimeout:
		res.Status = primitive.SendFlushDiskTimeout
	case resFlushSlaveTimeout:
		res.Status = primitive.SendFlushSlaveTimeout
	case resSlaveNotAvailable:
		res.Status = primitive.SendSlaveNotAvailable
	}
	res.QueueOffset, _ = strconv.ParseInt(f.ExtFields["queueOffset"], 10, 64)
	for i, m := range msgs {
		if i > 0 {
			res.MsgID += ","
		}
		res.MsgID += m.GetProperty(primitive.PropertyUniqueClientMessageIdKeyIndex)
	}
	return res, nil
}

// Shutdown closes the connections.
func (p *remotingProducer) Shutdown() error {
	p.pool.close()
	return nil
}
