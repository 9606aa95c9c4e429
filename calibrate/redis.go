package calibrate

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	redisdriver "github.com/inboxbench/inboxbench/brokers/redis"
	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/results"
)

// --- Redis -------------------------------------------------------------

// Redis ships no tool that consumes a stream through a consumer group
// and acknowledges what it read: redis-benchmark sends a command over and
// over without reading its replies, so an XREADGROUP of it could neither
// XACK the entries it got nor tell an empty reply from a full one. Its
// publish side is the driver's shape, though: pipelined XADDs of the
// driver's fields over as many connections as the driver has publishers,
// each waiting for its pipeline's replies before the next. So Redis is
// calibrated on publishing against redis-benchmark (redis-tools, from the
// same Debian release as the server), and its consume row is the driver's
// raw figure beside the reason (consumeReason).
type redisVendor struct{}

// redisBenchmark is the tool, installed with redis-server (redis-tools).
const redisBenchmark = "/usr/bin/redis-benchmark"

// consumeReason is the consume row's note: why there is no vendor figure.
const consumeReason = "no vendor figure: Redis has no tool that consumes a stream through a consumer group with XACK (redis-benchmark does not read its replies); the driver's drain is its raw figure"

func (redisVendor) fetch() (string, []string) { return "", nil } // a Debian package, no Maven artifact

func (redisVendor) tool() string {
	return "redis-benchmark (Debian redis-tools) XADD, pipelined; no consumer tool"
}

func (redisVendor) check(cfg config.Config) error {
	o, err := goredis.ParseURL(cfg.Get(redisdriver.SettingURL))
	if err == nil && (o.Password != "" || o.TLSConfig != nil) {
		// -a would show the password to every user of the host (ps).
		return config.Invalid(KeyBrokers, redisdriver.Name, "calibrate runs redis-benchmark, which takes a password on its command line and no TLS files here: calibrate a Redis without either (%s)", redisdriver.SettingURL)
	}
	return nil
}

// publish runs redis-benchmark with the shape's producers as connections
// (-c), its batch as the pipeline (-P), XADD of the driver's fields to
// one of the shape's shards at random (-r, __rand_int__ in the stream
// name) and as many requests as a short probe says fill the duration.
func (redisVendor) publish(ctx context.Context, r *runner, topic string) results.Measurement {
	m, err := r.sampleMessage()
	if err != nil {
		return r.measured(nil, Figure{}, err)
	}
	xadd := []string{"XADD", topic + "-rb.__rand_int__", "*", redisdriver.FieldID, m.ID, redisdriver.FieldKey, m.Key, redisdriver.FieldBody, string(m.Body)}
	defer r.dropBenchStreams(topic)
	room, err := redisVendor{}.room(ctx, r)
	if err != nil {
		return r.measured(nil, Figure{}, err)
	}
	probe := min(int64(20*r.Shape.Batch*r.Shape.Producers), room/4)
	cmd, f, err := r.redisBenchmark(ctx, "redis-benchmark-probe", probe, xadd)
	if err != nil {
		return r.measured(cmd, f, err)
	}
	r.dropBenchStreams(topic)
	n := max(probe, min(int64(f.MsgsPerS*r.Duration.Seconds()), room))
	cmd, f, err = r.redisBenchmark(ctx, "redis-benchmark", n, xadd)
	if err == nil && n == room {
		f.Method += fmt.Sprintf("; %d requests, what the server's maxmemory leaves room for (fewer than the duration would take)", n)
	}
	return r.measured(cmd, f, err)
}

// room is how many of the shape's messages the server can still hold:
// Redis keeps a stream in memory, and at maxmemory (noeviction) refuses
// every XADD. Each side publishes at most this many (bounded), so a fast
// side stops short of the duration rather than fail.
func (redisVendor) room(ctx context.Context, r *runner) (int64, error) {
	o, err := goredis.ParseURL(r.Cfg.Get(redisdriver.SettingURL))
	if err != nil {
		return 0, err
	}
	c := goredis.NewClient(o)
	defer c.Close()
	info, err := c.Info(ctx, "memory").Result()
	if err != nil {
		return 0, fmt.Errorf("redis: INFO memory: %w", err)
	}
	field := func(name string) int64 {
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
		return 0
	}
	limit, used := field("maxmemory"), field("used_memory")
	if limit == 0 {
		return math.MaxInt64, nil // no maxmemory: the host's memory is the limit
	}
	// An entry of the driver's fields costs its body and about 300 bytes
	// more (ids, field names, the stream's nodes); keep a third free.
	n := max(0, (limit-used)*2/3) / int64(r.Shape.MessageSize+300)
	if n < 1000 {
		return 0, fmt.Errorf("redis: the server is nearly full (%d of maxmemory %d bytes used): delete the topics of old runs", used, limit)
	}
	return n, nil
}

// redisBenchmark runs n requests of command and reads its rate.
func (r *runner) redisBenchmark(ctx context.Context, name string, n int64, command []string) ([]string, Figure, error) {
	addr := redisdriver.Addr(r.Cfg.Get(redisdriver.SettingURL))
	host, port, _ := strings.Cut(addr, ":")
	s := r.Shape
	cmd := append([]string{redisBenchmark, "-h", host, "-p", port, "-c", strconv.Itoa(s.Producers), "-P", strconv.Itoa(s.Batch),
		"-n", strconv.FormatInt(n, 10), "-r", strconv.Itoa(s.Shards), "--csv"}, command...)
	if err := privateDir(r.logDir); err != nil {
		return cmd, Figure{}, err
	}
	tctx, cancel := context.WithTimeout(ctx, r.Duration*2+toolSlack)
	defer cancel()
	out, err := exec.CommandContext(tctx, cmd[0], cmd[1:]...).CombinedOutput()
	_ = os.WriteFile(filepath.Join(r.logDir, name+".log"), out, 0o600)
	if err != nil {
		return cmd, Figure{}, fmt.Errorf("%s: %w: %s", name, err, lastLine(string(out)))
	}
	f, err := ParseRedisBenchmark(string(out), n)
	return cmd, f, err
}

// redisCSV is the last line of redis-benchmark --csv: the test (the
// command, unescaped), then rps and six latencies, each quoted.
var redisCSV = regexp.MustCompile(`"([0-9.]+)"(?:,"[0-9.]+"){6}\s*$`)

// ParseRedisBenchmark reads the requests per second of redis-benchmark
// --csv's one test, n requests: every request is one message.
func ParseRedisBenchmark(out string, n int64) (Figure, error) {
	m := redisCSV.FindStringSubmatch(strings.TrimSpace(out))
	if m == nil {
		return Figure{}, fmt.Errorf("redis-benchmark: no result line in its output: %s", lastLine(out))
	}
	rps, err := strconv.ParseFloat(m[1], 64)
	if err != nil || rps <= 0 {
		return Figure{}, fmt.Errorf("redis-benchmark: rate %q", m[1])
	}
	return Figure{MsgsPerS: rps, Messages: n, Method: "redis-benchmark's requests per second over its whole run (one XADD per request)"}, nil
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return truncate(lines[len(lines)-1], 300)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// dropBenchStreams deletes the streams redis-benchmark wrote ("%012d":
// its __rand_int__).
func (r *runner) dropBenchStreams(topic string) {
	o, err := goredis.ParseURL(r.Cfg.Get(redisdriver.SettingURL))
	if err != nil {
		return
	}
	c := goredis.NewClient(o)
	defer c.Close()
	keys := make([]string, r.Shape.Shards)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s-rb.%012d", topic, i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Del(ctx, keys...).Err(); err != nil {
		r.say("%-9s could not delete redis-benchmark's streams %s…: %v", redisdriver.Name, keys[0], err)
	}
}

// bounded is a vendor whose broker holds a topic in memory up to a limit:
// each side publishes at most room messages.
type bounded interface {
	room(ctx context.Context, r *runner) (int64, error)
}

// backlog: nothing is drained on the vendor side.
func (redisVendor) backlog(context.Context, *runner, string, int64) (int64, error) { return 0, nil }

// consume has no vendor tool: the row says why, and holds no figure.
func (redisVendor) consume(context.Context, *runner, string, int64) results.Measurement {
	return results.Measurement{Method: consumeReason}
}

func (redisVendor) notes(s results.Shape) []string {
	return []string{
		fmt.Sprintf("redis-benchmark: %d connections, each a pipeline of %d XADDs waited for before the next (as the driver's %d publishers with batches of %d), each to one of %d streams at random (the driver: the key's hash stream), with the driver's fields (id, key, the %d-byte body)", s.Producers, s.Batch, s.Producers, s.Batch, s.Shards, s.MessageSize),
		"redis-benchmark's figure covers its whole run (a C program: no warm-up to leave out); the driver's leaves the warm-up out",
		"each side publishes at most what the server's maxmemory leaves room for (Redis keeps streams in memory and refuses XADD when full), so at a high rate a side stops before the duration",
		consumeReason,
	}
}

func (redisVendor) atRate(context.Context, *runner, string, float64) (results.RateFigures, []string, error) {
	return results.RateFigures{}, nil, errNoRate
}

func (redisVendor) rateInfo() (string, string, []string) {
	return "", "no rate option: redis-benchmark sends as fast as its connections allow (-c, -P) and reads no stream",
		[]string{"the driver side alone: no Redis tool publishes at a rate or consumes a stream"}
}
