package golden

import "testing"

func TestFirstDiff(t *testing.T) {
	for _, tc := range []struct {
		got, want string
		n         int
		g, w      string
	}{
		{"a\nb\nc", "a\nx\nc", 2, `"b"`, `"x"`},
		{"a\nb", "a\nb\nc", 3, "end of file", `"c"`},
		{"a\nb\n", "a\nb", 3, `""`, "end of file"},
		{"a\nb", "a\nb", 0, "", ""},
	} {
		n, g, w := firstDiff([]byte(tc.got), []byte(tc.want))
		if n != tc.n || g != tc.g || w != tc.w {
			t.Errorf("firstDiff(%q, %q) = %d, %s, %s; want %d, %s, %s", tc.got, tc.want, n, g, w, tc.n, tc.g, tc.w)
		}
	}
}
