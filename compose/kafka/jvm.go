package kafka

import (
	"context"
	"embed"
	"errors"
	"os"
	"path/filepath"
	"time"

	"github.com/inboxbench/inboxbench/compose"
)

// The configuration templates of the nodes (compose.RenderTemplate).
//
//go:embed templates/*
var templates embed.FS

// jvmNode is one Kafka JVM, broker and controller in one, of any stack:
// its directory (config/, data/, logs/), its heap and its cluster's id.
type jvmNode struct {
	dir       string
	heap      []string
	clusterID string
}

// writeConfig renders the node's server.properties from template (0600:
// a secure node's holds its own login) and its log4j2.xml.
func (n jvmNode) writeConfig(template string, vars map[string]string) error {
	props := filepath.Join(n.dir, "config", "server.properties")
	if err := compose.WriteTemplate(templates, props, "templates/"+template, vars); err != nil {
		return err
	}
	if err := os.Chmod(props, 0o600); err != nil {
		return err
	}
	if err := compose.WriteTemplate(templates, filepath.Join(n.dir, "config", "log4j2.xml"), "templates/kafka-log4j2.xml", map[string]string{}); err != nil {
		return err
	}
	return os.MkdirAll(filepath.Join(n.dir, "logs"), 0o755)
}

// format formats the node's KRaft storage unless meta.properties marks it
// formatted, with the arguments users adds (SCRAM users; nil: none). The
// arguments go to the launcher in a file (JVM.ArgFile): a SCRAM user's
// password must not be on a command line, where every user of the host
// can read it.
func (n jvmNode) format(ctx context.Context, java *compose.Launcher, e *compose.Env, users func(*compose.Env) ([]string, error)) error {
	if _, err := os.Stat(filepath.Join(n.dir, "data", "meta.properties")); !errors.Is(err, os.ErrNotExist) {
		return nil
	}
	args := []string{"format", "--cluster-id", n.clusterID, "--config", filepath.Join(n.dir, "config", "server.properties"), "--ignore-formatted"}
	if users != nil {
		more, err := users(e)
		if err != nil {
			return err
		}
		args = append(args, more...)
	}
	fctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return java.Run(fctx, e.Path("logs", "kafka-format.log"), compose.JVM{
		Options: []string{"-Xmx256m",
			"-Dlog4j2.configurationFile=" + filepath.Join(n.dir, "config", "log4j2.xml"),
			"-Dkafka.logs.dir=" + filepath.Join(n.dir, "logs")},
		Main:    "kafka.tools.StorageTool",
		Args:    args,
		Dir:     n.dir,
		ArgFile: filepath.Join(n.dir, "config", "format.args"),
	})
}

// server is the node's JVM.
func (n jvmNode) server() compose.JVM {
	return compose.JVM{
		Options: append(append([]string{}, n.heap...), "-server",
			"-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
			"-XX:+ExplicitGCInvokesConcurrent", "-XX:+ExitOnOutOfMemoryError",
			"-Djava.awt.headless=true",
			"-Dkafka.logs.dir="+filepath.Join(n.dir, "logs"),
			"-Dlog4j2.configurationFile="+filepath.Join(n.dir, "config", "log4j2.xml")),
		Main: "kafka.Kafka",
		Args: []string{filepath.Join(n.dir, "config", "server.properties")},
		Dir:  n.dir,
	}
}
