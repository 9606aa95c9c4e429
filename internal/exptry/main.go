package main

import (
	"context"
	"fmt"
	"time"

	"github.com/inboxbench/inboxbench/brokers"
	_ "github.com/inboxbench/inboxbench/brokers/all"
	"github.com/inboxbench/inboxbench/brokers/brokerbench"
	"github.com/inboxbench/inboxbench/config"
)

func pub(name string, opts brokers.Options, o brokerbench.Options, maxBatches ...int) {
	cfg, _ := config.FromEnv()
	ctx := context.Background()
	b, err := brokers.Open(ctx, name, cfg, opts)
	if err != nil {
		panic(err)
	}
	defer b.Close()
	topic := fmt.Sprintf("exp-%s-%d", name, time.Now().UnixNano())
	if err := b.Setup(ctx, topic, 8); err != nil {
		panic(err)
	}
	defer b.(brokers.TopicDeleter).DeleteTopic(ctx, topic)
	r, err := brokerbench.Publish(ctx, b, topic, "x", o, brokerbench.Limit{Duration: 12 * time.Second})
	fmt.Printf("%s %v publishers=%d batch=%d: publish %.0f/s (%v)\n", name, opts, o.Publishers, o.Batch, r.RateAfter(3*time.Second), err)
	for _, mb := range maxBatches {
		o.MaxBatch = mb
		c, err := brokerbench.StartConsumer(ctx, b, topic, fmt.Sprintf("g%d-%d", mb, time.Now().UnixNano()), o, r.Messages)
		if err != nil {
			panic(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		err = c.Wait(wctx, 20*time.Second)
		cancel()
		res := c.Result()
		c.Close()
		fmt.Printf("%s maxbatch=%d: drain %.0f/s (%d msgs, startup %v, %v)\n", name, mb, res.Rate(), res.Messages, res.Startup, err)
	}
}

func main() {
	o := brokerbench.Options{Publishers: 8, Batch: 100}.WithDefaults()
	pub("rabbitmq", nil, o)
	pub("rabbitmq", brokers.Options{"publish-channels": "8"}, o)
	pub("rabbitmq", brokers.Options{"publish-channels": "8"}, brokerbench.Options{Publishers: 16, Batch: 100}.WithDefaults())
	pub("kafka", nil, o, 1, 100)
}
