package compose

import (
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
		if p := filepath.Join(h, "bin", "java"); isExecutable(p) {
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

// javaPackages are what the JVM services need from Debian: a Java 17
// runtime, and Maven to fetch their artifacts from Maven Central.
func javaPackages() []Package {
	return []Package{
		{Deb: javaPackage, Found: func() bool {
			if h := os.Getenv("JAVA_HOME"); h != "" && isExecutable(filepath.Join(h, "bin", "java")) {
				return true
			}
			_, err := exec.LookPath("java")
			return err == nil
		}},
		{Deb: "maven", Found: func() bool { _, err := exec.LookPath("mvn"); return err == nil }},
	}
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
