package compose

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// The pom every Java program's classpath is fetched with lives in
// compose/maven and is compiled into the binary; the services' own
// configuration templates live in their packages.
//
//go:embed maven/pom.xml.tmpl
var mavenFiles embed.FS

// markerName is written into the lib directory once it is complete; it
// holds the version on its first line and the pom's digest on the second.
const markerName = ".inboxbench-complete"

// requireBinary returns an error naming the Debian package to install when
// name is not on PATH.
func requireBinary(name, debPackage string) error {
	if _, err := exec.LookPath(name); err != nil {
		return fmt.Errorf("%s is not installed (not on PATH): install it with `apt-get install -y %s`", name, debPackage)
	}
	return nil
}

// placeholder is {{Name}} in a template.
var placeholder = regexp.MustCompile(`\{\{([A-Za-z]+)\}\}`)

// RenderTemplate fills the placeholders ({{Name}}) of the file name of
// fsys (a service's embedded templates) from vars; a placeholder vars
// lacks is an error. Whatever is conditional or repeated (a profile's
// extra settings, the pom's dependencies) is built in Go and passed as
// one value.
func RenderTemplate(fsys fs.FS, name string, vars map[string]string) ([]byte, error) {
	src, err := fs.ReadFile(fsys, name)
	if err != nil {
		return nil, err
	}
	var missing []string
	out := placeholder.ReplaceAllFunc(src, func(m []byte) []byte {
		key := string(m[2 : len(m)-2])
		v, ok := vars[key]
		if !ok {
			missing = append(missing, key)
		}
		return []byte(v)
	})
	if len(missing) > 0 {
		return nil, fmt.Errorf("template %s: no value for %s", name, strings.Join(missing, ", "))
	}
	return out, nil
}

// WriteTemplate renders the template name of fsys (RenderTemplate) into
// path, creating its directory.
func WriteTemplate(fsys fs.FS, path, name string, vars map[string]string) error {
	b, err := RenderTemplate(fsys, name, vars)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// Pom is the pom that fetches the runtime's classpath (compose/maven/pom.xml.tmpl).
func (j JavaRuntime) Pom() ([]byte, error) {
	var deps strings.Builder
	for _, c := range j.Deps {
		p := strings.Split(c, ":")
		if len(p) != 3 || p[0] == "" || p[1] == "" || p[2] == "" {
			return nil, fmt.Errorf("%s: Maven coordinate %q: want group:artifact:version", j.Name, c)
		}
		fmt.Fprintf(&deps, "\n    <dependency>\n      <groupId>%s</groupId>\n      <artifactId>%s</artifactId>\n      <version>%s</version>\n    </dependency>", p[0], p[1], p[2])
	}
	return RenderTemplate(mavenFiles, "maven/pom.xml.tmpl", map[string]string{"Name": j.Name, "Dependencies": deps.String()})
}

// fetch fetches the runtime into its lib directory unless a complete copy
// of the same pom is already there. Maven's local repository is
// <stack>/m2 so the download is shared by the services and survives
// `stack down`.
func (j JavaRuntime) fetch(ctx context.Context, e *Env) error {
	pom, err := j.Pom()
	if err != nil {
		return err
	}
	sum := sha256.Sum256(pom)
	digest := hex.EncodeToString(sum[:])
	dir := j.Home(e)
	lib := filepath.Join(dir, "lib")
	marker := filepath.Join(lib, markerName)
	if b, err := os.ReadFile(marker); err == nil {
		if lines := strings.Split(string(b), "\n"); len(lines) >= 2 && lines[0] == j.Version && lines[1] == digest {
			return nil
		}
	}
	if err := requireBinary("mvn", "maven"); err != nil {
		return err
	}
	if e.Out != nil {
		fmt.Fprintf(e.Out, "%s: fetching %s from Maven Central into %s\n", j.Name, j.Deps[0], lib)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	pomPath := filepath.Join(dir, "pom.xml")
	if err := os.WriteFile(pomPath, pom, 0o644); err != nil {
		return err
	}
	// A changed version must not leave the old jars on the classpath.
	if err := os.RemoveAll(lib); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "mvn", "-B", "-q",
		"-Dmaven.repo.local="+e.SharedPath("m2"),
		"-f", pomPath,
		"dependency:copy-dependencies",
		"-DincludeScope=runtime",
		"-DoutputDirectory="+lib)
	cmd.Dir = dir
	cmd.WaitDelay = 5 * time.Second
	if err := RunLogged(ctx, j.mavenLog(e), cmd); err != nil {
		return err
	}
	return os.WriteFile(marker, []byte(j.Version+"\n"+digest+"\n"), 0o644)
}

// mavenLog is where fetch logs Maven's output.
func (j JavaRuntime) mavenLog(e *Env) string { return e.Path("logs", j.Name+"-maven.log") }

// InstalledVersion returns the version a complete fetch recorded in e's
// stack, or "".
func (j JavaRuntime) InstalledVersion(e *Env) string {
	b, err := os.ReadFile(filepath.Join(j.Home(e), "lib", markerName))
	if err != nil {
		return ""
	}
	v, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimSpace(v)
}

// FetchJavaTool fetches a Java program's runtime classpath from Maven
// Central into <stack>/<dir>/lib, the way the stack fetches Kafka and
// RocketMQ (a generated pom, `mvn dependency:copy-dependencies`, the shared
// Maven cache <stack>/m2, a completion marker so the next call is free),
// and returns the JVM classpath of that directory. coords are
// "group:artifact:version"; name labels the pom and the Maven log
// (<stack>/logs/<name>-maven.log), version is what the marker records.
func FetchJavaTool(ctx context.Context, e *Env, dir, name, version string, coords ...string) (string, error) {
	j := JavaRuntime{Name: name, Version: version, Deps: coords, Dir: dir}
	if _, err := j.Pom(); err != nil {
		return "", err
	}
	if len(coords) == 0 {
		return "", fmt.Errorf("%s: no Maven coordinate to fetch", name)
	}
	if err := os.MkdirAll(e.Path("logs"), 0o755); err != nil {
		return "", err
	}
	if err := j.fetch(ctx, e); err != nil {
		return "", fmt.Errorf("%s: fetch %s from Maven Central: %w (log: %s)", name, strings.Join(coords, ", "), err, j.mavenLog(e))
	}
	return j.Classpath(e), nil
}
