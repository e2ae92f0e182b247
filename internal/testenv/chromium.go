package testenv

import (
	"bytes"
	"context"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// ChromiumPath finds Debian's chromium; without it the test fails with the install step.
func ChromiumPath(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "/usr/bin/chromium"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("chromium is not installed; install it with `apt-get install -y chromium` (CI's .ci/run does)")
	return ""
}

// RunChromium runs headless chromium with args and its profile in dir, so that runs with
// one dir share cookies, and returns its standard output. It is killed, with its whole
// process group, after two minutes.
func RunChromium(t testing.TB, dir string, args ...string) []byte {
	t.Helper()
	bin := ChromiumPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	base := []string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
		"--no-first-run", "--no-default-browser-check", "--disable-extensions", "--mute-audio", "--disable-popup-blocking",
		"--user-data-dir=" + dir, "--window-size=1280,900",
	}
	cmd := exec.CommandContext(ctx, bin, append(base, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		s := stderr.String()
		if len(s) > 2000 {
			s = "…" + s[len(s)-2000:]
		}
		t.Fatalf("chromium %v: %v\n%s", args, err, s)
	}
	return stdout.Bytes()
}

// OutputDir is where a test keeps what it wants a person to look at (screenshots): the
// directory X402GATE_TEST_OUTPUT names, under a directory for the test, else t.TempDir().
func OutputDir(t testing.TB) string {
	t.Helper()
	root := os.Getenv("X402GATE_TEST_OUTPUT")
	if root == "" {
		return t.TempDir()
	}
	dir := filepath.Join(root, filepath.Base(t.Name()))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// ReadPNG decodes the PNG at path, a screenshot; a missing or broken file fails the test.
func ReadPNG(t testing.TB, path string) image.Image {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s is not a PNG: %v", path, err)
	}
	return img
}
