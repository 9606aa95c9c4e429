package compose

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// javaPackage is the Debian package that provides a Java runtime new enough
// for Kafka 4.x brokers and RocketMQ 5.x (Java 17).
const javaPackage = "openjdk-17-jre-headless"

// javaBinary returns the java launcher to use: $JAVA_HOME/bin/java when
// JAVA_HOME is set, else java from PATH. It checks the major version is at
// least minMajor.
func javaBinary(ctx context.Context, minMajor int) (string, error) {
	java := ""
	if h := os.Getenv("JAVA_HOME"); h != "" {
		if p := filepath.Join(h, "bin", "java"); IsExecutable(p) {
			java = p
		}
	}
	if java == "" {
		if err := requireBinary("java", javaPackage); err != nil {
			return "", err
		}
		java, _ = exec.LookPath("java")
	}
	major, err := javaMajor(ctx, java)
	if err != nil {
		return "", err
	}
	if major < minMajor {
		return "", fmt.Errorf("%s is Java %d; Java %d or newer is needed: install it with `apt-get install -y %s` (or set JAVA_HOME)", java, major, minMajor, javaPackage)
	}
	return java, nil
}

var javaVersionRE = regexp.MustCompile(`version "(\d+)(?:\.(\d+))?`)

// javaMajor runs `java -version` and returns the feature version (8 for
// 1.8, 17 for 17.0.x).
func javaMajor(ctx context.Context, java string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, java, "-version").CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("%s -version: %v: %s", java, err, out)
	}
	m := javaVersionRE.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("%s -version: cannot read the version from %q", java, out)
	}
	major, _ := strconv.Atoi(string(m[1]))
	if major == 1 && len(m[2]) > 0 {
		major, _ = strconv.Atoi(string(m[2]))
	}
	return major, nil
}

// classpath is the JVM wildcard classpath of every jar in lib.
func classpath(lib string) string {
	return filepath.Join(lib, "*")
}

// JavaPackages are what the JVM services need from Debian: a Java 17
// runtime, and Maven to fetch their artifacts from Maven Central.
func JavaPackages() []Package {
	return []Package{
		{Deb: javaPackage, Found: func() bool {
			if h := os.Getenv("JAVA_HOME"); h != "" && IsExecutable(filepath.Join(h, "bin", "java")) {
				return true
			}
			_, err := exec.LookPath("java")
			return err == nil
		}},
		{Deb: "maven", Found: func() bool { _, err := exec.LookPath("mvn"); return err == nil }},
	}
}

// Java returns the java launcher the stack uses ($JAVA_HOME/bin/java, else
// java on PATH), checked to be Java 17 or newer.
func Java(ctx context.Context) (string, error) { return javaBinary(ctx, 17) }

// JavaRuntime is a service that runs on the JVM from Maven Central
// artifacts (Kafka, RocketMQ): its classpath, fetched into <Dir>/lib of
// its stack by Install, and the JVMs its Start launches on it (Launcher).
// The same runtime serves a service's every variant, each stack with its
// own copy.
type JavaRuntime struct {
	Name    string   // the service's name: labels errors, the pom and its Maven log
	Version string   // the release it runs, recorded at install (InstalledVersion)
	Deps    []string // the classpath's Maven coordinates, group:artifact:version
	Dir     string   // its directory in a stack (Env.Path): lib/ is the classpath
}

// Home is the runtime's directory in e's stack.
func (j JavaRuntime) Home(e *Env) string { return e.Path(j.Dir) }

// Classpath is the JVM classpath of the runtime's jars in e's stack.
func (j JavaRuntime) Classpath(e *Env) string { return classpath(filepath.Join(j.Home(e), "lib")) }

// Install checks that Java 17 is there and fetches the artifacts, unless
// the same ones are already in place (a Service's Install).
func (j JavaRuntime) Install(ctx context.Context, e *Env) error {
	if _, err := javaBinary(ctx, 17); err != nil {
		return fmt.Errorf("%s: %w", j.Name, err)
	}
	if err := j.fetch(ctx, e); err != nil {
		return fmt.Errorf("%s: %w", j.Name, err)
	}
	return nil
}

// Launcher is what every Start of the service begins with: the java
// launcher, checked, with which to start its JVMs in e's stack, once
// Install put the artifacts in place and configure (nil: nothing) wrote
// the configuration files the JVMs read, rewritten on every start.
func (j JavaRuntime) Launcher(ctx context.Context, e *Env, configure func(*Env) error) (*Launcher, error) {
	java, err := javaBinary(ctx, 17)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", j.Name, err)
	}
	if j.InstalledVersion(e) == "" {
		return nil, fmt.Errorf("%s: %s is not installed: run the install step first (bench stack up%s)", j.Name, filepath.Join(j.Home(e), "lib"), VariantFlag(e.Variant))
	}
	if configure != nil {
		if err := configure(e); err != nil {
			return nil, fmt.Errorf("%s: %w", j.Name, err)
		}
	}
	return &Launcher{java: java, runtime: j, env: e}, nil
}

// JVM is one Java program to run on a runtime's classpath:
// java <Options> -cp <classpath> <Main> <Args>.
type JVM struct {
	Options []string // heap, GC and system properties
	Main    string   // the main class
	Args    []string // the program's arguments
	Dir     string   // its working directory; the runtime's home when empty
	Env     []string // added to the environment, NAME=value
	// ArgFile, for Run, is where the arguments go instead of the command
	// line (WriteJavaArgFile; removed after): a password among them
	// stays off the command line every user of the host can read.
	ArgFile string
}

// Launcher starts a runtime's JVMs in one stack (JavaRuntime.Launcher).
type Launcher struct {
	java    string
	runtime JavaRuntime
	env     *Env
}

// Command is m's command line.
func (l *Launcher) Command(m JVM) *exec.Cmd { return l.command(context.Background(), m) }

func (l *Launcher) command(ctx context.Context, m JVM) *exec.Cmd {
	args := append(append([]string{}, m.Options...), "-cp", l.runtime.Classpath(l.env), m.Main)
	cmd := exec.CommandContext(ctx, l.java, append(args, m.Args...)...)
	cmd.Dir = cmp.Or(m.Dir, l.runtime.Home(l.env))
	if len(m.Env) > 0 {
		cmd.Env = append(os.Environ(), m.Env...)
	}
	return cmd
}

// Start starts m detached as the process p (StartDetached); the error
// names p.
func (l *Launcher) Start(p Proc, m JVM) error {
	if err := StartDetached(p, l.Command(m)); err != nil {
		return fmt.Errorf("%s: %w", p.Name, err)
	}
	return nil
}

// Run runs m to completion (a setup tool: Kafka's storage format), its
// output appended to log (RunLogged).
func (l *Launcher) Run(ctx context.Context, log string, m JVM) error {
	cmd := l.command(ctx, m)
	if m.ArgFile != "" {
		if err := WriteJavaArgFile(m.ArgFile, cmd.Args[1:]); err != nil {
			return err
		}
		defer os.Remove(m.ArgFile)
		cmd.Args = []string{cmd.Args[0], "@" + m.ArgFile}
	}
	return RunLogged(ctx, log, cmd)
}

// WriteJavaArgFile writes args as an argument file of the java launcher
// (JDK 9+: `java @path`), mode 0600: one argument a line, quoted, so
// spaces, quotes and backslashes survive. A JVM started as `java @path`
// shows only that on its command line, which `ps` shows to every user of
// the host, so an argument holding a secret (a password a tool takes only
// as an argument) stays in the file.
func WriteJavaArgFile(path string, args []string) error {
	return os.WriteFile(path, []byte(JavaArgFileText(args)), 0o600)
}

// JavaArgFileText is the text WriteJavaArgFile writes.
func JavaArgFileText(args []string) string {
	var b strings.Builder
	esc := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\r", `\r`)
	for _, a := range args {
		b.WriteString(`"` + esc.Replace(a) + `"` + "\n")
	}
	return b.String()
}
