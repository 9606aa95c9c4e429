package redis

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/inboxbench/inboxbench/brokers"
)

// message reads a stream entry's fields back into a Message.
func message(values map[string]any) brokers.Message {
	var m brokers.Message
	for k, v := range values {
		s, _ := v.(string)
		switch {
		case k == FieldID:
			m.ID = s
		case k == FieldKey:
			m.Key = s
		case k == FieldBody:
			m.Body = []byte(s)
		case strings.HasPrefix(k, HeaderField):
			if m.Headers == nil {
				m.Headers = map[string]string{}
			}
			m.Headers[k[len(HeaderField):]] = s
		}
	}
	return m
}

// entryTime is the server's time in an entry id "<ms>-<seq>".
func entryTime(id string) time.Time {
	ms, _, _ := strings.Cut(id, "-")
	n, _ := strconv.ParseInt(ms, 10, 64)
	return time.UnixMilli(n)
}

// entryLess orders entry ids "<ms>-<seq>" as the stream does.
func entryLess(a, b string) bool {
	am, as, _ := strings.Cut(a, "-")
	bm, bs, _ := strings.Cut(b, "-")
	an, _ := strconv.ParseUint(am, 10, 64)
	bn, _ := strconv.ParseUint(bm, 10, 64)
	if an != bn {
		return an < bn
	}
	ai, _ := strconv.ParseUint(as, 10, 64)
	bi, _ := strconv.ParseUint(bs, 10, 64)
	return ai < bi
}

// trimEvery is how often a stream's reader trims it.
const trimEvery = time.Second

// trim drops, at most once per trimEvery, the entries every group of the
// stream has acknowledged: those before the oldest entry some group has
// pending or has not read yet (XTRIM MINID ~, which drops whole nodes
// only, so a few more stay). A failure is left for the next time.
func (w *worker) trim(ctx context.Context) {
	if time.Since(w.trimmed) < trimEvery {
		return
	}
	w.trimmed = time.Now()
	c := w.s.client
	groups, err := c.XInfoGroups(ctx, w.stream).Result()
	if err != nil || len(groups) == 0 {
		return
	}
	low := ""
	for _, g := range groups {
		keep := g.LastDeliveredID // read, and acknowledged unless pending
		if g.Pending > 0 {
			p, err := c.XPending(ctx, w.stream, g.Name).Result()
			if err != nil {
				return
			}
			keep = p.Lower
		}
		if low == "" || entryLess(keep, low) {
			low = keep
		}
	}
	if low != "" && low != "0-0" {
		_ = c.XTrimMinIDApprox(ctx, w.stream, low, 0).Err()
	}
}

// DeadLetters implements brokers.DeadLetterReader: the dead-letter stream
// read from its beginning (nothing is removed), waiting until want
// entries are there or ctx ends.
func (b *Broker) DeadLetters(ctx context.Context, topic string, want int) ([]brokers.Message, error) {
	for {
		entries, err := b.client.XRange(ctx, topic+DLQSuffix, "-", "+").Result()
		if err != nil && ctx.Err() == nil {
			return nil, b.errorf("read %s: %w", topic+DLQSuffix, err)
		}
		out := make([]brokers.Message, 0, len(entries))
		for _, e := range entries {
			out = append(out, message(e.Values))
		}
		if len(out) >= want {
			return out, nil
		}
		select {
		case <-ctx.Done():
			return out, fmt.Errorf("redis: read dead letters of %s: got %d of %d: %w", topic, len(out), want, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
