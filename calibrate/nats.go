package calibrate

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	natsdriver "github.com/inboxbench/inboxbench/brokers/nats"
	natsstack "github.com/inboxbench/inboxbench/compose/nats"
	"github.com/inboxbench/inboxbench/config"
	"github.com/inboxbench/inboxbench/results"
)

// NatsCLIVersion is the natscli release whose `nats bench` calibrate runs,
// built with go install like the stack's server (v0.5.1 does not build
// from the module proxy).
const NatsCLIVersion = "v0.5.0"

// natsCLI is natscli's main package.
const natsCLI = "github.com/nats-io/natscli/nats"

// goInstaller is a vendor whose tool is a Go program built with `go
// install` into the stack directory, not Maven artifacts; install returns
// its path.
type goInstaller interface {
	install(ctx context.Context, r *runner) (string, error)
}

// --- NATS JetStream ----------------------------------------------------

type natsVendor struct{}

func (natsVendor) fetch() (string, []string) {
	return NatsCLIVersion, []string{natsCLI + "@" + NatsCLIVersion}
}

func (natsVendor) tool() string {
	return "github.com/nats-io/natscli " + NatsCLIVersion + " nats bench js pub async / nats bench js consume"
}

func (natsVendor) install(ctx context.Context, r *runner) (string, error) {
	bin := r.Stack.Path("calibrate", "nats", "bin", "nats")
	return bin, natsstack.GoTool{Bin: bin, Pkg: natsCLI, Version: NatsCLIVersion}.Install(ctx, r.Stack)
}

// natsEnv is where `nats bench` connects: the driver's URL, in its
// environment (a password in it stays off the command line).
func (r *runner) natsEnv() []string { return []string{"NATS_URL=" + r.Cfg.Get(natsdriver.SettingURL)} }

// natsPublishCount is how many messages `nats bench` publishes: it takes
// a count, not a time, so about the shape's duration at 20k msgs/s.
func (r *runner) natsPublishCount() int64 { return int64(r.Duration.Seconds() * 20000) }

// publish: `nats bench js pub async` with Producers clients, each keeping
// up to Batch asynchronous publishes in flight, into the stream of the
// topic's shard 0 (it takes one subject), every message with a unique
// Nats-Msg-Id (--dedup) and the driver's key and headers.
func (natsVendor) publish(ctx context.Context, r *runner, topic string) results.Measurement {
	m, err := r.sampleMessage()
	if err != nil {
		return r.measured(nil, Figure{}, err)
	}
	args := []string{"bench", "js", "pub", "async", natsdriver.Subject(topic, 0), "--stream", natsdriver.StreamName(topic, 0),
		"--msgs", strconv.FormatInt(r.natsPublishCount(), 10), "--size", strconv.Itoa(r.Shape.MessageSize),
		"--clients", strconv.Itoa(r.Shape.Producers), "--batch", strconv.Itoa(r.Shape.Batch), "--dedup", "--no-progress",
		"-H", natsdriver.HeaderKey + ":" + m.Key}
	for _, k := range slices.Sorted(maps.Keys(m.Headers)) {
		args = append(args, "-H", k+":"+m.Headers[k])
	}
	cmd := append([]string{r.toolBin}, args...)
	out, err := r.runTool(ctx, toolRun{name: "nats-bench-pub", program: r.toolBin, args: args, env: r.natsEnv(),
		timeout: 5*r.Duration + toolSlack})
	if err != nil {
		return r.measured(cmd, Figure{}, err)
	}
	f, err := ParseNatsBench(out)
	return r.measured(cmd, f, err)
}

// backlog is what the vendor's stream holds.
func (natsVendor) backlog(ctx context.Context, r *runner, topic string, _ int64) (int64, error) {
	nc, err := natsdriver.Connect(r.Cfg, "inboxbench-calibrate")
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	s, err := js.Stream(ctx, natsdriver.StreamName(topic, 0))
	if err != nil {
		return 0, fmt.Errorf("nats: stream of %s: %w", topic, err)
	}
	return int64(s.CachedInfo().State.Msgs), nil
}

// consume: `nats bench js consume` with Consumers clients on one durable
// pull consumer of the stream (explicit acks, MaxAckPending = Prefetch,
// created here as the driver creates its own), until it has read them
// all.
func (natsVendor) consume(ctx context.Context, r *runner, topic string, messages int64) results.Measurement {
	consumer := "vendor"
	if err := r.natsConsumer(ctx, natsdriver.StreamName(topic, 0), consumer); err != nil {
		return r.measured(nil, Figure{}, err)
	}
	args := []string{"bench", "js", "consume", "--stream", natsdriver.StreamName(topic, 0), "--consumer", consumer,
		"--msgs", strconv.FormatInt(messages, 10), "--clients", strconv.Itoa(r.Shape.Consumers),
		"--batch", strconv.Itoa(r.Shape.Prefetch), "--no-progress"}
	cmd := append([]string{r.toolBin}, args...)
	out, err := r.runTool(ctx, toolRun{name: "nats-bench-consume", program: r.toolBin, args: args, env: r.natsEnv(),
		timeout: r.MaxDrain + toolSlack})
	if err != nil {
		return r.measured(cmd, Figure{}, err)
	}
	f, err := ParseNatsBench(out)
	return r.measured(cmd, f, err)
}

// natsConsumer creates the durable pull consumer `nats bench js consume`
// reads (it does not create one).
func (r *runner) natsConsumer(ctx context.Context, stream, name string) error {
	nc, err := natsdriver.Connect(r.Cfg, "inboxbench-calibrate")
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	_, err = js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: name, AckPolicy: jetstream.AckExplicitPolicy,
		MaxAckPending: r.Shape.Prefetch, DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return fmt.Errorf("nats: consumer %s on %s: %w", name, stream, err)
	}
	return nil
}

func (natsVendor) check(config.Config) error { return nil }

func (natsVendor) notes(s results.Shape) []string {
	return []string{
		fmt.Sprintf("nats bench js pub async: %d clients, each up to %d asynchronous publishes in flight, into one stream (the topic's shard 0: it takes one subject), a unique Nats-Msg-Id per message (--dedup) and the driver's key header; the driver spreads its messages over the topic's %d streams, one connection, a window of unacknowledged publishes", s.Producers, s.Batch, s.Shards),
		"nats bench publishes a count (the shape's duration × 20k msgs/s) and reports its whole run's rate (no warm-up left out)",
		fmt.Sprintf("nats bench js consume: %d clients sharing one durable pull consumer of that stream, explicit acks; the driver: one pinned consumer per stream, acks in stream order", s.Consumers),
	}
}

func (natsVendor) atRate(context.Context, *runner, string, float64) (results.RateFigures, []string, error) {
	return results.RateFigures{}, nil, errNoRate
}

func (natsVendor) rateInfo() (string, string, []string) {
	return "", "nats bench has no target rate (only a sleep between publishes)", nil
}

// natsStatsRE is a stats line of `nats bench`: a client's, or the
// aggregate of several, which comes last.
var (
	natsStatsRE  = regexp.MustCompile(`stats: ([\d,]+) msgs/sec`)
	natsClientRE = regexp.MustCompile(`(?m)^\s*\[\d+\] ([\d,]+) msgs/sec .*\(([\d,]+) msgs\)`)
)

// ParseNatsBench reads `nats bench`'s summary: the aggregated rate (or
// the one client's), the clients' rates as the series and their message
// counts summed.
func ParseNatsBench(out string) (Figure, error) {
	all := natsStatsRE.FindAllStringSubmatch(out, -1)
	if all == nil {
		return Figure{}, ErrNoReport
	}
	rate, _ := strconv.ParseFloat(strings.ReplaceAll(all[len(all)-1][1], ",", ""), 64)
	f := Figure{MsgsPerS: rate, Method: "nats bench's summary: its aggregated msgs/sec over the whole run (every client's messages over the run's time)"}
	for _, m := range natsClientRE.FindAllStringSubmatch(out, -1) {
		r, _ := strconv.ParseFloat(strings.ReplaceAll(m[1], ",", ""), 64)
		n, _ := strconv.ParseInt(strings.ReplaceAll(m[2], ",", ""), 10, 64)
		f.Series = append(f.Series, r)
		f.Messages += n
	}
	return f, nil
}
