package render

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// cspViolation is how Chromium logs a fetch the page's content security
// policy blocked (with --enable-logging=stderr, console messages go to
// stderr): every page of the site forbids all fetches, so any reference to
// an outside resource shows up here instead of reaching the network.
var cspViolation = regexp.MustCompile(`violates the following Content Security Policy directive[^\n]*`)

const cspMeta = `<meta http-equiv="Content-Security-Policy" content="default-src 'none';`

// loadOffline opens a page in headless Chromium and returns the DOM it
// built and every fetch the page attempted (each blocked by its policy).
// A page without the policy is refused: without it a fetch would not be
// seen here, it would go out.
func loadOffline(t *testing.T, bin, page string) (dom string, fetches []string) {
	t.Helper()
	if !strings.Contains(string(mustReadFile(t, page)), cspMeta) {
		t.Fatalf("%s has no content security policy forbidding fetches", page)
	}
	profile := filepath.Join(t.TempDir(), "profile")
	out, log := chromiumOutput(t, bin, profile, "--enable-logging=stderr", "--v=0",
		"--proxy-server=127.0.0.1:9", // nothing the browser itself tries leaves the machine
		"--dump-dom", "file://"+page)
	return string(out), cspViolation.FindAllString(string(log), -1)
}

// TestSiteInChromium renders the site's pages in headless Chromium: none
// may attempt a fetch, the charts must render with their links, and the
// page references nothing outside itself.
func TestSiteInChromium(t *testing.T) {
	bin := chromiumPath(t)
	out := filepath.Join(t.TempDir(), "site")
	if _, err := Publish(PublishOptions{Dirs: []string{resultsTree(t)}, Out: out, Now: t0}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		page string
		want []string
	}{
		{"index.html", []string{"night-5", "mutation score 2/2", "trends/contention.html"}},
		{"trends/contention.html", []string{"kafka/tx", `<a href="../runs/night-1/report.html">`, "series-break"}},
		{"runs/night-1/report.html", []string{"expected FAIL, got FAIL"}},
	} {
		page := filepath.Join(out, filepath.FromSlash(tc.page))
		stripped := strings.NewReplacer("http://www.w3.org/2000/svg", "", "http://www.w3.org/1999/xlink", "").Replace(string(mustReadFile(t, page)))
		if m := networkRef.FindString(stripped); m != "" {
			t.Errorf("%s references something outside the site: %q", tc.page, m)
		}
		dom, fetches := loadOffline(t, bin, page)
		if len(fetches) > 0 {
			t.Errorf("%s tried to fetch: %v", tc.page, fetches)
		}
		for _, w := range tc.want {
			if !strings.Contains(dom, w) {
				t.Errorf("%s: Chromium's DOM lacks %q", tc.page, w)
			}
		}
		if strings.Contains(tc.page, "trends/") {
			for _, f := range figureRe.FindAllStringSubmatch(dom, -1) {
				if !strings.Contains(f[2], "<svg") || len(textRe.FindAllString(f[2], -1)) == 0 {
					t.Errorf("trend chart %s did not render", f[1])
				}
			}
		}
	}
}

// TestLoadOfflineSeesFetches is the check's negative control: a page with
// an outside image and style sheet must be caught.
func TestLoadOfflineSeesFetches(t *testing.T) {
	bin := chromiumPath(t)
	page := filepath.Join(t.TempDir(), "bad.html")
	writeFile(t, page, []byte(`<!DOCTYPE html><html><head>`+cspMeta+` style-src 'unsafe-inline'">`+
		`<link rel="stylesheet" href="https://fonts.example.invalid/a.css"></head><body><img src="http://example.invalid/x.png"></body></html>`))
	_, fetches := loadOffline(t, bin, page)
	if len(fetches) != 2 {
		t.Errorf("caught %d fetches, want 2 (the image and the style sheet): %v", len(fetches), fetches)
	}
}
