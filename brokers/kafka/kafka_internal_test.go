package kafka

import (
	"testing"

	"github.com/inboxbench/inboxbench/brokers"
)

// RecordBytes counts what Publish puts in a record: key, value, the id
// header and the caller's headers, names included.
func TestRecordBytesCountsKeyValueAndHeaders(t *testing.T) {
	m := brokers.Message{Key: "key-7", ID: "calib-12", Body: make([]byte, 100), Headers: map[string]string{"h": "abc"}}
	want := len("key-7") + 100 + len(headerID) + len("calib-12") + len("h") + len("abc")
	if got := RecordBytes(m); got != want {
		t.Fatalf("RecordBytes = %d, want %d", got, want)
	}
}
