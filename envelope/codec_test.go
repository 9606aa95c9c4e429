package envelope

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// oddEvents carry every string and number encoding/json treats specially.
func oddEvents() []*Event {
	odd := []string{"", "plain", `quote " backslash \ slash /`, "<html> & </html>", "tab\tnl\ncr\rbs\bff\f",
		"\x00\x01\x1f\x7f", "héllo wörld ✓ 日本", "bad utf8 \xff\xfe end", "sep \u2028 and \u2029", "emoji 🎉"}
	var out []*Event
	for i, s := range odd {
		e := sample()
		e.Source, e.ID, e.Subject, e.Data = s, s+"-id", "agg "+s, strings.Repeat(s, 3)
		e.IdempotencyKey, e.Tenant, e.Operation = s, "t"+s, "o"+s
		e.Attempt = i
		e.Amount, e.AggregateVersion = -int64(i)*1_000_000_007, int64(i)+1
		e.Time = time.Date(2026, 1, 2, 3, 4, 5, i*123456789%1_000_000_000, time.FixedZone("x", (i-5)*1800))
		e.IntendedAt = time.Time{}
		if i%2 == 0 {
			e.IntendedAt = e.Time.Add(time.Duration(i) * time.Millisecond).UTC()
		}
		out = append(out, e)
	}
	return out
}

// TestAppendJSONIsEncodingJSON: the hand-written encoder writes exactly the
// bytes of json.Marshal, for ordinary and odd events alike.
func TestAppendJSONIsEncodingJSON(t *testing.T) {
	for _, e := range append(oddEvents(), sample(), &Event{}) {
		want, werr := json.Marshal(e)
		got, gerr := AppendJSON(nil, e)
		if (werr == nil) != (gerr == nil) || !bytes.Equal(got, want) {
			t.Fatalf("AppendJSON(%+v)\n got %s (%v)\nwant %s (%v)", e, got, gerr, want, werr)
		}
	}
	e := sample()
	e.Time = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := AppendJSON(nil, e); err == nil {
		t.Fatal("AppendJSON accepted year 10000, which json.Marshal refuses")
	}
}

// TestDecodeFastIsEncodingJSON: what the fast path accepts, encoding/json
// decodes to the same event; what it declines still decodes (or fails) as
// encoding/json says.
func TestDecodeFastIsEncodingJSON(t *testing.T) {
	inputs := [][]byte{[]byte(`{}`), []byte(` { "id" : "x" , "amount" : -0 } `)}
	for _, e := range append(oddEvents(), sample()) {
		b, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, b, bytes.ReplaceAll(b, []byte(`,"`), []byte(",\n  \"")))
	}
	for _, in := range inputs {
		sameAsEncodingJSON(t, in)
	}
	// Declined: escapes, a differently-cased key, null, a fraction, a
	// leading zero, an unknown key, trailing data.
	for _, in := range []string{`{"id":"a\"b"}`, `{"ID":"x"}`, `{"source":null}`, `{"amount":1.0}`, `{"amount":01}`,
		`{"amout":1}`, `{"id":"x"} {}`, `{"time":"2026-01-02T03:04:05Z","time":"bad"}`} {
		var e Event
		if decodeFast([]byte(in), &e, true) {
			t.Errorf("decodeFast accepted %s, which only encoding/json should judge", in)
		}
		sameAsEncodingJSON(t, []byte(in))
	}
}

func sameAsEncodingJSON(t *testing.T, in []byte) {
	t.Helper()
	var fast, skip Event
	ok := decodeFast(in, &fast, true)
	if decodeFast(in, &skip, false) != ok {
		t.Fatalf("decodeFast(%s) accepts with the payload and without it differently", in)
	}
	if !ok {
		return
	}
	want := fast
	want.Data = ""
	if !reflect.DeepEqual(skip, want) {
		t.Fatalf("decodeFast(%s) without the payload\n = %+v\nwant %+v", in, skip, want)
	}
	dec := json.NewDecoder(bytes.NewReader(in))
	dec.DisallowUnknownFields()
	var std Event
	if err := dec.Decode(&std); err != nil || dec.More() {
		t.Fatalf("decodeFast accepted %s, encoding/json refuses it: %v", in, err)
	}
	if !reflect.DeepEqual(fast, std) {
		t.Fatalf("decodeFast(%s)\n = %+v\nencoding/json: %+v", in, fast, std)
	}
}

func FuzzCodecIsEncodingJSON(f *testing.F) {
	for _, e := range oddEvents() {
		b, _ := json.Marshal(e)
		f.Add(e.Source, e.Data, e.Amount, b)
	}
	f.Fuzz(func(t *testing.T, s, data string, n int64, in []byte) {
		e := sample()
		e.Source, e.ID, e.Data, e.Amount, e.Tenant = s, s, data, n, s
		want, werr := json.Marshal(e)
		got, gerr := AppendJSON(nil, e)
		if (werr == nil) != (gerr == nil) || !bytes.Equal(got, want) {
			t.Fatalf("AppendJSON\n got %s\nwant %s", got, want)
		}
		sameAsEncodingJSON(t, in)
		sameAsEncodingJSON(t, want)
	})
}

// message512 is a workload-sized envelope.
func message512() []byte {
	e := sample()
	e.SpecVersion, e.IntendedAt = SpecVersion, e.Time
	b, _ := json.Marshal(e)
	e.Data = strings.Repeat("abcdefghij", (512-len(b))/10)
	b, _ = json.Marshal(e)
	return b
}

func BenchmarkUnmarshal(b *testing.B) {
	msg := message512()
	b.Run("codec", func(b *testing.B) {
		b.SetBytes(int64(len(msg)))
		for b.Loop() {
			if _, err := Unmarshal(msg); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.SetBytes(int64(len(msg)))
		for b.Loop() {
			if _, err := unmarshalJSON(msg); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkMarshal(b *testing.B) {
	e, err := Unmarshal(message512())
	if err != nil {
		b.Fatal(err)
	}
	b.Run("codec", func(b *testing.B) {
		for b.Loop() {
			if _, err := Marshal(e); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			if _, err := json.Marshal(e); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestPlainStringEveryPosition: a control character, a backslash or an
// invalid byte is found at every offset, inside and after the eight-byte
// words, and valid multi-byte UTF-8 passes.
func TestPlainStringEveryPosition(t *testing.T) {
	base := strings.Repeat("abcdefgh", 5)
	if !plainString([]byte(base)) {
		t.Fatal("plain ASCII refused")
	}
	for i := range len(base) {
		for _, bad := range []string{"\x00", "\x1f", "\\", "\xff", "\xc3"} {
			b := []byte(base)
			b[i] = bad[0]
			if plainString(b) {
				t.Errorf("%q at %d accepted", bad, i)
			}
		}
		for _, good := range []string{"é", "€", " ", "~", "\x7f"} {
			s := base[:i] + good + base[i:]
			if !plainString([]byte(s)) {
				t.Errorf("%q at %d refused", good, i)
			}
		}
	}
}
