package brokerbench

import (
	"bytes"
	"testing"

	"github.com/klauspost/compress/s2"

	"github.com/inboxbench/inboxbench/envelope"
)

// The bodies are envelopes of the asked size that snappy (franz-go's
// default batch compression) cannot shrink much, even when many of them
// are batched together.
func TestBodiesAreDistinctAndIncompressible(t *testing.T) {
	bodies, err := Bodies(1024, bodyPool)
	if err != nil {
		t.Fatal(err)
	}
	var all bytes.Buffer
	for i, b := range bodies {
		if len(b) < 1000 || len(b) > 1100 {
			t.Fatalf("body %d is %d bytes, want about 1024", i, len(b))
		}
		if _, err := envelope.Unmarshal(b); err != nil {
			t.Fatalf("body %d is not an envelope: %v", i, err)
		}
		if i > 0 && bytes.Equal(b, bodies[i-1]) {
			t.Fatalf("bodies %d and %d are equal", i-1, i)
		}
		all.Write(b)
	}
	z := s2.EncodeSnappy(nil, all.Bytes())
	if ratio := float64(len(z)) / float64(all.Len()); ratio < 0.7 {
		t.Errorf("%d bodies compress to %.0f%% of their size: a batching client would send far fewer bytes than a real stream", len(bodies), 100*ratio)
	}
}
