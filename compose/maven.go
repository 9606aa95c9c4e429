package compose

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// The pom and configuration templates of the Java services (Kafka,
// RocketMQ) live in compose/maven and are compiled into the binary.
//
//go:embed maven/*
var mavenFiles embed.FS

// mavenDep is one Maven coordinate of a service's runtime classpath.
type mavenDep struct {
	Group, Artifact, Version string
}

func (d mavenDep) String() string { return d.Group + ":" + d.Artifact + ":" + d.Version }

// pomVars fills compose/maven/pom.xml.tmpl.
func (r mavenRuntime) pomVars() map[string]string {
	var deps strings.Builder
	for _, d := range r.Deps {
		fmt.Fprintf(&deps, "\n    <dependency>\n      <groupId>%s</groupId>\n      <artifactId>%s</artifactId>\n      <version>%s</version>\n    </dependency>", d.Group, d.Artifact, d.Version)
	}
	return map[string]string{"Name": r.Name, "Dependencies": deps.String()}
}

// mavenRuntime describes a classpath fetched from Maven Central into
// <dir>/lib by `mvn dependency:copy-dependencies` on a generated pom.
type mavenRuntime struct {
	Name    string // service name, also the pom's artifactId prefix
	Version string // the service version the marker records (Ready reports it)
	Deps    []mavenDep
}

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

// placeholder is {{Name}} in a file of compose/maven.
var placeholder = regexp.MustCompile(`\{\{([A-Za-z]+)\}\}`)

// renderTemplate fills the placeholders of the embedded file maven/<name>
// from vars; a placeholder vars lacks is an error. Whatever is
// conditional or repeated (a profile's extra settings, the pom's
// dependencies) is built in Go and passed as one value.
func renderTemplate(name string, vars map[string]string) ([]byte, error) {
	src, err := mavenFiles.ReadFile("maven/" + name)
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

// writeTemplate renders maven/<name> into path, creating its directory.
func writeTemplate(path, name string, vars map[string]string) error {
	b, err := renderTemplate(name, vars)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// install fetches the runtime into dir/lib unless a complete copy of the
// same pom is already there. Maven's local repository is <stack>/m2 so the
// download is shared by the services and survives `stack down`.
func (r mavenRuntime) install(ctx context.Context, e *Env, dir string) error {
	pom, err := renderTemplate("pom.xml.tmpl", r.pomVars())
	if err != nil {
		return err
	}
	sum := sha256.Sum256(pom)
	digest := hex.EncodeToString(sum[:])
	lib := filepath.Join(dir, "lib")
	marker := filepath.Join(lib, markerName)
	if b, err := os.ReadFile(marker); err == nil {
		if lines := strings.Split(string(b), "\n"); len(lines) >= 2 && lines[0] == r.Version && lines[1] == digest {
			return nil
		}
	}
	if err := requireBinary("mvn", "maven"); err != nil {
		return err
	}
	if e.Out != nil {
		fmt.Fprintf(e.Out, "%s: fetching %s from Maven Central into %s\n", r.Name, r.Deps[0], lib)
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
	if err := RunLogged(ctx, e.Path("logs", r.Name+"-maven.log"), cmd); err != nil {
		return err
	}
	return os.WriteFile(marker, []byte(r.Version+"\n"+digest+"\n"), 0o644)
}

// installedVersion returns the version recorded by a complete install in
// dir, or "".
func installedVersion(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, "lib", markerName))
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
	r := mavenRuntime{Name: name, Version: version}
	for _, c := range coords {
		p := strings.Split(c, ":")
		if len(p) != 3 || p[0] == "" || p[1] == "" || p[2] == "" {
			return "", fmt.Errorf("%s: Maven coordinate %q: want group:artifact:version", name, c)
		}
		r.Deps = append(r.Deps, mavenDep{p[0], p[1], p[2]})
	}
	if len(r.Deps) == 0 {
		return "", fmt.Errorf("%s: no Maven coordinate to fetch", name)
	}
	if err := os.MkdirAll(e.Path("logs"), 0o755); err != nil {
		return "", err
	}
	path := e.Path(dir)
	if err := r.install(ctx, e, path); err != nil {
		return "", fmt.Errorf("%s: fetch %s from Maven Central: %w (log: %s)", name, strings.Join(coords, ", "), err, e.Path("logs", name+"-maven.log"))
	}
	return classpath(filepath.Join(path, "lib")), nil
}

// Java returns the java launcher the stack uses ($JAVA_HOME/bin/java, else
// java on PATH), checked to be Java 17 or newer.
func Java(ctx context.Context) (string, error) { return javaBinary(ctx, 17) }
