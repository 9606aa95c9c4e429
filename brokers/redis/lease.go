package redis

import (
	"context"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// A stream's lease for a group is a key holding the consumer name of its
// reader, with a time to live: taken when free (or already this
// consumer's), renewed only while it is still this consumer's, and
// deleted only by its holder.
var (
	takeLease = goredis.NewScript(`
local v = redis.call('get', KEYS[1])
if v == false or v == ARGV[1] then
  redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2])
  return 1
end
return 0`)
	renewLease = goredis.NewScript(`
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0`)
	dropLease = goredis.NewScript(`
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1])
end
return 0`)
)

// lease is one stream's lease as a worker holds it.
type lease struct {
	c        *goredis.Client
	key, own string
	ttl      time.Duration
}

// take reports whether the lease is now this consumer's.
func (l *lease) take(ctx context.Context) (bool, error) {
	n, err := takeLease.Run(ctx, l.c, []string{l.key}, l.own, l.ttl.Milliseconds()).Int()
	return n == 1, err
}

// keep renews the lease every fifth of its time to live until ctx ends,
// and calls lost when it is no longer sure to hold it: another consumer
// holds it, or no renewal succeeded for three fifths of it (the lease
// may expire and be taken two fifths later, so the reader stops first).
func (l *lease) keep(ctx context.Context, lost func()) {
	t := time.NewTicker(l.ttl / 5)
	defer t.Stop()
	renewed := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		start := time.Now()
		rctx, cancel := context.WithTimeout(ctx, l.ttl/5)
		n, err := renewLease.Run(rctx, l.c, []string{l.key}, l.own, l.ttl.Milliseconds()).Int()
		cancel()
		switch {
		case err == nil && n == 1:
			renewed = start
		case err == nil, time.Since(renewed) > l.ttl*3/5:
			lost()
			return
		}
	}
}

// drop gives the lease up if it is still this consumer's.
func (l *lease) drop() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = dropLease.Run(ctx, l.c, []string{l.key}, l.own).Err()
}
