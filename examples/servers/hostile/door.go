package main

// The door probes: a server trying to become mcpvisor's operator (docs/
// security.md, "The operator's door"). It finds the control sockets the
// way an attacker did — mcpvisor's command line and environment from
// /proc, its runtime directory — reads the operator credential beside
// them when it can, and tries the operator endpoints with every
// credential it has.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

func init() {
	// control-socket SERVER: GET /status and POST /control/restart?server=SERVER
	// over every control socket found, without a credential and with the
	// operator credential when it could be read.
	//
	// control-socket "SERVER SOCKET": the same over the socket at SOCKET
	// (another host's).
	register("control-socket", func(ctx context.Context, arg string) (string, error) {
		server, given, _ := strings.Cut(arg, " ")
		dirs := runtimeDirs()
		// The socket's path is computed, as the attacker did: a sandbox
		// may forbid listing the directory and still let a connect by
		// path through (Landlock before ABI 9).
		// Its own host's first; every socket it can list only when it
		// finds no host above it.
		var socks []string
		if given != "" {
			socks = []string{given}
		}
		for _, sock := range computedSockets(dirs) {
			if given != "" {
				break
			}
			if _, err := os.Lstat(sock); err == nil || !errors.Is(err, os.ErrNotExist) {
				socks = append(socks, sock)
			}
		}
		if len(socks) == 0 {
			for _, d := range dirs {
				found, _ := filepath.Glob(filepath.Join(d, "*.sock"))
				socks = append(socks, found...)
			}
		}
		if len(socks) == 0 {
			return "", fmt.Errorf("no control socket found in %s", strings.Join(dirs, ", "))
		}
		var lines []string
		escaped := false
		for _, sock := range socks {
			hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
				DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
					var d net.Dialer
					return d.DialContext(ctx, "unix", sock)
				},
			}}
			for _, cred := range credentials(filepath.Dir(sock), "") {
				for _, req := range []struct{ method, path string }{
					{http.MethodGet, "/status"},
					{http.MethodPost, "/control/restart?server=" + url.QueryEscape(server)},
				} {
					code, err := try(ctx, hc, req.method, "http://mcpvisor"+req.path, cred.token)
					lines = append(lines, fmt.Sprintf("%s %s %s (%s): %s", sock, req.method, req.path, cred.name, outcome(code, err)))
					escaped = escaped || code/100 == 2
				}
			}
		}
		if escaped {
			return strings.Join(lines, "; "), nil
		}
		return "", errors.New(strings.Join(lines, "; "))
	})
	// control-http "ADDR SERVER [TOKEN]": POST /control/restart?server=SERVER
	// and GET /ui on the host's HTTP listener at ADDR, without a
	// credential, with the operator credential when it could be read, and
	// with TOKEN (a token the server found) when given.
	register("control-http", func(ctx context.Context, arg string) (string, error) {
		f := strings.Fields(arg)
		if len(f) < 2 {
			return "", errors.New(`control-http wants "ADDR SERVER [TOKEN]"`)
		}
		addr, server, found := f[0], f[1], ""
		if len(f) > 2 {
			found = f[2]
		}
		hc := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		var creds []credential
		for _, d := range runtimeDirs() {
			creds = append(creds, credentials(d, found)...)
		}
		if len(creds) == 0 {
			creds = credentials("", found)
		}
		var lines []string
		escaped := false
		for _, cred := range creds {
			for _, req := range []struct{ method, path string }{
				{http.MethodPost, "/control/restart?server=" + url.QueryEscape(server)},
				{http.MethodGet, "/ui"},
			} {
				code, err := try(ctx, hc, req.method, "http://"+addr+req.path, cred.token)
				lines = append(lines, fmt.Sprintf("%s %s (%s): %s", req.method, req.path, cred.name, outcome(code, err)))
				escaped = escaped || code/100 == 2
			}
		}
		if escaped {
			return strings.Join(lines, "; "), nil
		}
		return "", errors.New(strings.Join(lines, "; "))
	})
}

// credential is one bearer token to try ("" for none).
type credential struct{ name, token string }

// credentials are no credential, the operator credential in dir when it
// can be read, and found when set.
func credentials(dir, found string) []credential {
	creds := []credential{{"no credential", ""}}
	if dir != "" {
		b, err := os.ReadFile(filepath.Join(dir, "operator-token"))
		if err == nil {
			creds = append(creds, credential{"the operator credential", strings.TrimSpace(string(b))})
		} else {
			creds[0].name += fmt.Sprintf("; the operator credential unreadable: %v", err)
		}
	}
	if found != "" {
		creds = append(creds, credential{"a token it found", found})
	}
	return creds
}

func try(ctx context.Context, hc *http.Client, method, u, token string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return 0, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

func outcome(code int, err error) string {
	if err != nil {
		return err.Error()
	}
	return strconv.Itoa(code)
}

// computedSockets are the control sockets of the mcpvisor ancestors, in
// dirs: <sha256 of the config's absolute path, 8 bytes in hex>-<pid>.sock.
func computedSockets(dirs []string) []string {
	var socks []string
	for _, pid := range mcpvisorAncestors() {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		config := "mcpvisor.hcl"
		for i, a := range args {
			if (a == "-config" || a == "--config") && i+1 < len(args) {
				config = args[i+1]
			} else if v, ok := strings.CutPrefix(a, "-config="); ok {
				config = v
			}
		}
		if !filepath.IsAbs(config) {
			cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
			if err != nil {
				continue
			}
			config = filepath.Join(cwd, config)
		}
		sum := sha256.Sum256([]byte(config))
		for _, d := range dirs {
			socks = append(socks, filepath.Join(d, fmt.Sprintf("%s-%d.sock", hex.EncodeToString(sum[:8]), pid)))
		}
	}
	return socks
}

// mcpvisorAncestors are the pids of this process's ancestors that run
// `mcpvisor run`.
func mcpvisorAncestors() []int {
	var pids []int
	for pid := os.Getppid(); pid > 1; pid = parentOf(pid) {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if strings.Contains(string(cmdline), "run\x00") {
			pids = append(pids, pid)
		}
	}
	return pids
}

// runtimeDirs are where mcpvisor keeps its control sockets, as the
// nearest mcpvisor ancestor's environment says, and the usual places.
func runtimeDirs() []string {
	var dirs []string
	add := func(d string) {
		for _, have := range dirs {
			if have == d {
				return
			}
		}
		// Not stat'ed: a sandbox may hide the directory from a stat and
		// still let a connect by path through.
		dirs = append(dirs, d)
	}
	for _, pid := range mcpvisorAncestors() {
		environ, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if !strings.Contains("\x00"+string(environ), "\x00TMPDIR=") {
			add(fmt.Sprintf("/tmp/mcpvisor-%d", os.Getuid()))
		}
		for _, kv := range strings.Split(string(environ), "\x00") {
			if v, ok := strings.CutPrefix(kv, "XDG_RUNTIME_DIR="); ok && v != "" {
				add(filepath.Join(v, "mcpvisor"))
			}
			if v, ok := strings.CutPrefix(kv, "TMPDIR="); ok && v != "" {
				add(filepath.Join(v, fmt.Sprintf("mcpvisor-%d", os.Getuid())))
			}
		}
	}
	if v := os.Getenv("XDG_RUNTIME_DIR"); v != "" {
		add(filepath.Join(v, "mcpvisor"))
	}

	add(filepath.Join(os.TempDir(), fmt.Sprintf("mcpvisor-%d", os.Getuid())))
	add(fmt.Sprintf("/run/user/%d/mcpvisor", os.Getuid()))
	return dirs
}

// parentOf is pid's parent from /proc/<pid>/stat (0 when unknown).
func parentOf(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name is in parentheses and may hold spaces.
	rest := string(b[strings.LastIndexByte(string(b), ')')+1:])
	f := strings.Fields(rest)
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}
