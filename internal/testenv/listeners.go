package testenv

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// waitOldListenersClosed waits until the Caddy process listens on each TCP port through one
// socket only. Caddy binds every config's listeners with SO_REUSEPORT and closes the old
// config's after /load has answered, so until then the kernel may queue a new connection on
// the old socket and reset it when that closes: Caddy's reload, not ours, and a test's
// request right after Reload must not meet it.
func (c *Caddy) waitOldListenersClosed(t testing.TB, deadline time.Time) {
	t.Helper()
	for {
		ports, err := listeningPorts(c.cmd.Process.Pid)
		if err != nil {
			t.Fatalf("testenv: caddy's listeners: %v", err)
		}
		doubled := 0
		for _, n := range ports {
			if n > 1 {
				doubled++
			}
		}
		if doubled == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("testenv: caddy still listens twice on a port after the reload: %v", ports)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// listeningPorts counts the listening TCP sockets process pid holds, by local port: its
// descriptors' socket inodes matched against /proc/net/tcp and /proc/net/tcp6.
func listeningPorts(pid int) (map[int]int, error) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		link, err := os.Readlink(dir + "/" + fd.Name())
		if err != nil {
			continue // closed since ReadDir
		}
		if inode, ok := strings.CutPrefix(link, "socket:["); ok {
			inodes[strings.TrimSuffix(inode, "]")] = true
		}
	}
	ports := map[int]int{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		if err := countListening(table, inodes, ports); err != nil {
			return nil, err
		}
	}
	return ports, nil
}

// countListening adds to ports the sockets of table (the format of /proc/net/tcp) in state
// LISTEN whose inode is in inodes.
func countListening(table string, inodes map[string]bool, ports map[int]int) error {
	f, err := os.Open(table)
	if os.IsNotExist(err) {
		return nil // no IPv6
	}
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 || fields[3] != "0A" || !inodes[fields[9]] {
			continue
		}
		_, hexPort, ok := strings.Cut(fields[1], ":")
		if !ok {
			return fmt.Errorf("%s: local address %q", table, fields[1])
		}
		port, err := strconv.ParseUint(hexPort, 16, 16)
		if err != nil {
			return fmt.Errorf("%s: local address %q: %w", table, fields[1], err)
		}
		ports[int(port)]++
	}
	return sc.Err()
}
