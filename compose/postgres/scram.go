package postgres

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
)

// pgPasswordVerifier is the SCRAM-SHA-256 verifier of password as
// PostgreSQL stores it (RFC 5803): what the stack sends in ALTER ROLE …
// PASSWORD instead of the password. PostgreSQL stores a string in this
// form as it is, so the password itself never reaches the server, its
// logs or pg_stat_statements, which records the statement's text and
// shows it to every role with pg_read_all_stats (the suite's has it,
// through pg_monitor).
func pgPasswordVerifier(password string) (string, error) {
	salt := make([]byte, 16)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	return scramSHA256(password, salt, 4096)
}

func scramSHA256(password string, salt []byte, iterations int) (string, error) {
	salted, err := pbkdf2.Key(sha256.New, password, salt, iterations, sha256.Size)
	if err != nil {
		return "", err
	}
	mac := func(key []byte, msg string) []byte {
		h := hmac.New(sha256.New, key)
		h.Write([]byte(msg))
		return h.Sum(nil)
	}
	stored := sha256.Sum256(mac(salted, "Client Key"))
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Sprintf("SCRAM-SHA-256$%d:%s$%s:%s", iterations, b64(salt), b64(stored[:]), b64(mac(salted, "Server Key"))), nil
}
