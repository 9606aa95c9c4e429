package compose

import "testing"

// A generated password never starts with '-', which a vendor tool's
// command line takes for an option (one in 64 of base64url's first
// characters): 5,000 draws miss a regression with odds of 1 in 10^34.
func TestPasswordNeverStartsWithADash(t *testing.T) {
	for range 5000 {
		if p := password(); p[0] == '-' || len(p) != 32 {
			t.Fatalf("password %q: starts with '-' or is not 32 characters", p)
		}
	}
}
