package runner

import (
	"bufio"
	"os"
	"os/exec"
	"runtime/debug"
	"strconv"
	"strings"
)

// clientVersions reads the client libraries' versions from the build.
func clientVersions() map[string]string {
	out := map[string]string{}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return out
	}
	for _, d := range bi.Deps {
		for _, m := range []string{"github.com/jackc/pgx/v5", "github.com/rabbitmq/amqp091-go", "github.com/twmb/franz-go",
			"github.com/apache/rocketmq-client-go/v2", "github.com/HdrHistogram/hdrhistogram-go"} {
			if d.Path == m {
				out[m] = d.Version
			}
		}
	}
	return out
}

// gitCommit is the commit the binary was built from, or the working tree's.
func gitCommit() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				return s.Value
			}
		}
	}
	b, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(b))
	if err := exec.Command("git", "diff", "--quiet", "HEAD").Run(); err != nil {
		c += "-dirty"
	}
	return c
}

func memoryMiB() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if fields := strings.Fields(s.Text()); len(fields) >= 2 && fields[0] == "MemTotal:" {
			kb, _ := strconv.ParseInt(fields[1], 10, 64)
			return kb / 1024
		}
	}
	return 0
}
