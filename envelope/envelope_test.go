package envelope

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func sample() *Event {
	return &Event{Source: "payments", ID: "payment-recorded-42-1", Type: "payment.recorded",
		Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Subject: "order-42",
		AggregateVersion: 1, Kind: Increment, Amount: 10}
}

func TestRoundTrip(t *testing.T) {
	b, err := Marshal(sample())
	if err != nil {
		t.Fatal(err)
	}
	e, err := Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if e.Key() != "payments payment-recorded-42-1" || e.Amount != 10 || e.AggregateVersion != 1 {
		t.Fatalf("round trip changed the event: %+v", e)
	}
}

func TestRejects(t *testing.T) {
	for name, tc := range map[string]struct{ in, want string }{
		"not json":      {`{`, "malformed JSON"},
		"unknown field": {`{"specversion":"1.0","source":"s","id":"1","type":"t","subject":"a","aggregateversion":1,"kind":"increment","amout":3}`, "amout"},
		"no id":         {`{"specversion":"1.0","source":"s","type":"t","subject":"a","aggregateversion":1,"kind":"increment"}`, "id is empty"},
		"bad kind":      {`{"specversion":"1.0","source":"s","id":"1","type":"t","subject":"a","aggregateversion":1,"kind":"delta"}`, `kind "delta"`},
		"version 0":     {`{"specversion":"1.0","source":"s","id":"1","type":"t","subject":"a","aggregateversion":0,"kind":"increment"}`, "versions start at 1"},
		"trailing":      {`{"specversion":"1.0","source":"s","id":"1","type":"t","subject":"a","aggregateversion":1,"kind":"increment"} {}`, "trailing"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Unmarshal([]byte(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Unmarshal(%s) = %v, want error containing %q", tc.in, err, tc.want)
			}
		})
	}
}

func FuzzUnmarshal(f *testing.F) {
	b, _ := Marshal(sample())
	f.Add(b)
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		e, err := Unmarshal(in)
		skip, serr := UnmarshalSkipData(in)
		if (err == nil) != (serr == nil) {
			t.Fatalf("Unmarshal: %v, UnmarshalSkipData: %v: want the same verdict", err, serr)
		}
		if err != nil {
			return
		}
		want := *e
		want.Data = ""
		if !reflect.DeepEqual(*skip, want) {
			t.Fatalf("UnmarshalSkipData = %+v, want Unmarshal's %+v without the payload", *skip, want)
		}
		// Whatever decodes must be valid and survive a round trip.
		out, err := Marshal(e)
		if err != nil {
			t.Fatalf("decoded event does not re-encode: %v", err)
		}
		e2, err := Unmarshal(out)
		if err != nil || e2.Key() != e.Key() || e2.AggregateVersion != e.AggregateVersion || e2.Amount != e.Amount {
			t.Fatalf("round trip differs: %v", err)
		}
	})
}
