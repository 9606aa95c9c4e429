package rocketmq

import (
	"testing"

	"github.com/apache/rocketmq-client-go/v2/primitive"
)

// TestSignedRequests needs no server: with an access key, the consumer's
// requests carry RocketMQ's ACL fields, the signature being the HMAC-SHA1
// of the field values in name order, then the body (the expected values
// were computed with openssl: printf 'akgtb' | openssl dgst -sha1 -hmac sk
// -binary | base64).
func TestSignedRequests(t *testing.T) {
	ext := map[string]string{"topic": "t", "consumerGroup": "g"}
	creds := primitive.Credentials{AccessKey: "ak", SecretKey: "sk"}
	for _, tc := range []struct {
		body, want string
	}{{"b", "Sf5cyoD+G7GILPW23iQYEdT0Pp8="}, {"", "WnGMxpzYE/5U8Otf5/2OETonqp8="}} {
		got := signed(creds, ext, []byte(tc.body))
		if got["Signature"] != tc.want || got["AccessKey"] != "ak" || got["topic"] != "t" {
			t.Errorf("body %q: %v, want Signature %s", tc.body, got, tc.want)
		}
	}
	if _, ok := ext["Signature"]; ok {
		t.Error("signed changed the caller's fields")
	}
	if got := signed(primitive.Credentials{}, ext, nil); len(got) != 2 {
		t.Errorf("without an access key the fields must stay as they are: %v", got)
	}
}
