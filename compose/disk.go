package compose

import (
	"fmt"
	"syscall"
)

// What a full disk does to the stack. RocketMQ computes its disk's use
// from the space a process may still take: at 85% it deletes commit-log
// files whatever their age, at 90% it refuses messages; Kafka and
// PostgreSQL stop when a write fails. Measured on the local stack with
// 12 GB left (95% by RocketMQ's count): its store log said "disk space
// will be full soon", and the benchmark Consumer of `bench calibrate`
// received nothing of a topic written seconds before. One `make bench`
// leaves 16–18 GB under the stack directory (docs/stack.md).
const (
	diskWarnUsed = 0.80     // below RocketMQ's 85%
	diskWarnFree = 20 << 30 // about one make bench
)

// DiskNote returns a warning when the file system holding dir is too full
// for another benchmark, "" when it is not (or cannot be read).
func DiskNote(dir string) string {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil || st.Blocks == 0 {
		return ""
	}
	bs := uint64(st.Bsize)
	return diskNote(dir, st.Blocks*bs, st.Bavail*bs)
}

// diskNote is DiskNote on a file system of total bytes with avail bytes
// free for an unprivileged process.
func diskNote(dir string, total, avail uint64) string {
	used := 1 - float64(avail)/float64(total)
	if used < diskWarnUsed && avail >= diskWarnFree {
		return ""
	}
	return fmt.Sprintf("the disk holding %s has %.1f GB free (%.0f%% used, as RocketMQ counts it): one `make bench` writes 16–18 GB there, and RocketMQ deletes its commit log at 85%% used and refuses messages at 90%%; free space first (`bench stack down --wipe` deletes every run's data)",
		dir, float64(avail)/1e9, 100*used)
}
