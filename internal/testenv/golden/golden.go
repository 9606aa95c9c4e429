// Package golden compares what a test renders with a file kept in the
// package's testdata/, and rewrites the file instead when the tests run
// with -update (go test ./PKG -update), so an intended change is one
// command and a reviewed diff.
package golden

import (
	"bytes"
	"flag"
	"os"
	"strconv"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files the tests compare with, instead of comparing")

// Check compares got with the file at path, or writes got there under
// -update. A difference fails t naming the first line that differs.
func Check(t testing.TB, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run the package's tests with -update to create it)", err)
	}
	if bytes.Equal(got, want) {
		return
	}
	n, g, w := firstDiff(got, want)
	t.Errorf("%s differs at line %d:\n got: %s\nwant: %s\n(if the change is intended, run the package's tests with -update and review the diff)", path, n, g, w)
}

// firstDiff is the first line (from 1) where got and want differ, and
// that line of each, quoted, or "end of file" past the end of one.
func firstDiff(got, want []byte) (n int, g, w string) {
	gl, wl := bytes.Split(got, []byte("\n")), bytes.Split(want, []byte("\n"))
	line := func(ls [][]byte, i int) string {
		if i < len(ls) {
			return strconv.Quote(string(ls[i]))
		}
		return "end of file"
	}
	for i := 0; i < len(gl) || i < len(wl); i++ {
		if g, w = line(gl, i), line(wl, i); g != w {
			return i + 1, g, w
		}
	}
	return 0, "", "" // equal
}
