package calibrate

import "testing"

// `nats bench js pub async` with two clients, as natscli v0.5.0 prints it.
const natsBenchPub = `09:54:50 Starting JetStream asynchronous publisher benchmark [batch=500, clients=2, msgs=20,000]
09:54:50 Using stream: CALIBTEST

  [1] 4,611 msgs/sec ~ 4.5 MiB/sec ~ min: 10,443.16us ~ avg: 108,010.23us ~ max: 315,779.54us ~ P50: 83,500.27us ~ P90: 212,069.97us ~ P99: 315,779.54us ~ P99.9: 315,779.54us (10,000 msgs)
  [2] 4,578 msgs/sec ~ 4.5 MiB/sec ~ min: 10,568.81us ~ avg: 109,187.69us ~ max: 254,325.04us ~ P50: 82,496.98us ~ P90: 211,425.94us ~ P99: 254,325.04us ~ P99.9: 254,325.04us (10,000 msgs)

 NATS JetStream asynchronous publisher aggregated stats: 9,156 msgs/sec ~ 8.9 MiB/sec
 message rates min 4,578 | avg 4,594 | max 4,611 | stddev 16 msgs
`

func TestParseNatsBench(t *testing.T) {
	f, err := ParseNatsBench(natsBenchPub)
	if err != nil {
		t.Fatal(err)
	}
	if f.MsgsPerS != 9156 || f.Messages != 20000 || len(f.Series) != 2 || f.Series[0] != 4611 {
		t.Fatalf("got %+v, want the aggregate 9156 msgs/s over 20000 messages, the clients' rates as the series", f)
	}
	if _, err := ParseNatsBench("nats: error: no stream\n"); err != ErrNoReport {
		t.Fatalf("output without a summary: %v, want ErrNoReport", err)
	}
}
