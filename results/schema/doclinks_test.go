package schema_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// TestDocLinksResolve holds the documentation together: every relative
// link in README.md, docs/*.md and the other READMEs names a file of the
// repository and, with a #fragment, a heading of that file (as GitHub
// turns headings into anchors). A page moved or a heading renamed fails
// here, naming the link, instead of leaving a dead link for the reader.
// Pages of docs/ must be reachable from README.md or docs/README.md.
func TestDocLinksResolve(t *testing.T) {
	root := filepath.Join("..", "..")
	pages := []string{"README.md", "brokers/README.md", "examples/strategies/README.md"}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil || len(docs) == 0 {
		t.Fatalf("no docs/*.md (%v)", err)
	}
	for _, d := range docs {
		pages = append(pages, filepath.ToSlash(strings.TrimPrefix(d, root+string(filepath.Separator))))
	}
	anchors := map[string]map[string]bool{} // page → anchors of its headings
	anchorsOf := func(page string) map[string]bool {
		if a, ok := anchors[page]; ok {
			return a
		}
		a := map[string]bool{}
		if b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(page))); err == nil {
			seen := map[string]int{}
			for _, h := range headings(string(b)) {
				slug := slugify(h)
				if n := seen[slug]; n > 0 {
					a[slug+"-"+strconv.Itoa(n)] = true
				} else {
					a[slug] = true
				}
				seen[slug]++
			}
		}
		anchors[page] = a
		return a
	}
	linked := map[string]bool{}
	for _, page := range pages {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(page)))
		if err != nil {
			t.Fatal(err)
		}
		for _, target := range links(string(b)) {
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, frag, _ := strings.Cut(target, "#")
			dest := page
			if file != "" {
				dest = filepath.ToSlash(filepath.Join(filepath.Dir(page), file))
				if strings.HasPrefix(dest, "../") {
					t.Errorf("%s: link %q leaves the repository", page, target)
					continue
				}
				if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(dest))); err != nil {
					t.Errorf("%s: link %q: no file %s", page, target, dest)
					continue
				}
				if page == "README.md" || page == "docs/README.md" {
					linked[dest] = true
				}
			}
			if frag != "" && strings.HasSuffix(dest, ".md") && !anchorsOf(dest)[frag] {
				t.Errorf("%s: link %q: %s has no heading with the anchor #%s", page, target, dest, frag)
			}
		}
	}
	for _, page := range pages {
		if strings.HasPrefix(page, "docs/") && page != "docs/README.md" && !linked[page] {
			t.Errorf("%s is linked from neither README.md nor docs/README.md", page)
		}
	}
}

var (
	fence      = regexp.MustCompile("(?ms)^```.*?^```[^\n]*$")
	inlineCode = regexp.MustCompile("`[^`\n]*`")
	mdLink     = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)\)`)
	mdHeading  = regexp.MustCompile(`(?m)^#{1,6} +(.+?) *#* *$`)
)

// links returns the targets of the Markdown links outside code.
func links(md string) []string {
	md = fence.ReplaceAllString(md, "")
	md = inlineCode.ReplaceAllStringFunc(md, func(s string) string {
		if strings.Contains(s, "](") {
			return "" // code that looks like a link
		}
		return s
	})
	var out []string
	for _, m := range mdLink.FindAllStringSubmatch(md, -1) {
		out = append(out, m[1])
	}
	return out
}

// headings returns the text of the ATX headings outside fenced code.
func headings(md string) []string {
	var out []string
	for _, m := range mdHeading.FindAllStringSubmatch(fence.ReplaceAllString(md, ""), -1) {
		out = append(out, m[1])
	}
	return out
}

// slugify is GitHub's anchor for a heading: lower case, every character
// that is not a letter, digit, space, hyphen or underscore dropped (the
// backticks of code included), spaces turned into hyphens.
func slugify(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}
