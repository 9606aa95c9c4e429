package compose

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/template"
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

// renderTemplate executes the embedded template maven/<name> with data.
func renderTemplate(name string, data any) ([]byte, error) {
	src, err := mavenFiles.ReadFile("maven/" + name)
	if err != nil {
		return nil, err
	}
	t, err := template.New(name).Option("missingkey=error").Parse(string(src))
	if err != nil {
		return nil, fmt.Errorf("template %s: %w", name, err)
	}
	var b bytes.Buffer
	if err := t.Execute(&b, data); err != nil {
		return nil, fmt.Errorf("template %s: %w", name, err)
	}
	return b.Bytes(), nil
}

// writeTemplate renders maven/<name> into path, creating its directory.
func writeTemplate(path, name string, data any) error {
	b, err := renderTemplate(name, data)
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
	pom, err := renderTemplate("pom.xml.tmpl", r)
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
		"-Dmaven.repo.local="+e.Path("m2"),
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
