package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
)

// execEvent is one event of execd's command stream.
type execEvent struct {
	Type  string `json:"type"`
	Text  string `json:"text"`
	Error *struct {
		Name  string `json:"ename"`
		Value string `json:"evalue"`
	} `json:"error"`
}

func runExec(ctx context.Context, e *env, args []string) (int, error) {
	fs := e.flags()
	cwd := fs.String("cwd", "", "working directory in the sandbox")
	c, rest, err := e.connect(fs, args)
	if err != nil {
		return 0, err
	}
	if len(rest) > 1 && rest[1] == "--" {
		rest = append(rest[:1], rest[2:]...)
	}
	if len(rest) < 2 {
		return 0, usagef("exec needs an ID and a command")
	}
	id, command := rest[0], shellCommand(rest[1:])

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	interrupts := make(chan os.Signal, 2)
	signal.Notify(interrupts, os.Interrupt)
	defer signal.Stop(interrupts)

	req := map[string]any{"command": command}
	if *cwd != "" {
		req["cwd"] = *cwd
	}
	res, err := c.do(ctx, http.MethodPost, execdPath(id, "/command"), nil, req, "")
	if err != nil {
		return 1, err
	}
	defer res.Body.Close()

	// The first Ctrl-C interrupts the command (its exit code still comes);
	// a second one gives up on it.
	commandID := make(chan string, 1)
	go func() {
		cid, interrupted := "", false
		for {
			select {
			case cid = <-commandID:
			case <-ctx.Done():
				return
			case <-interrupts:
				if interrupted || cid == "" {
					cancel()
					return
				}
				interrupted = true
				if c.json(ctx, http.MethodDelete, execdPath(id, "/command"), url.Values{"id": {cid}}, nil, nil) != nil {
					cancel() // closing the stream kills the command too
					return
				}
			}
		}
	}()
	code, err := streamEvents(res.Body, e.stdout, e.stderr, func(cid string) { commandID <- cid })
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return 130, errors.New("interrupted")
	}
	return code, err
}

// streamEvents copies a command's output to stdout and stderr as it comes
// and returns its exit code. onInit sees the command's id.
func streamEvents(body io.Reader, stdout, stderr io.Writer, onInit func(string)) (int, error) {
	br := bufio.NewReaderSize(body, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if line = bytes.TrimSpace(line); len(line) > 0 {
			var ev execEvent
			if jerr := json.Unmarshal(line, &ev); jerr != nil {
				return 1, fmt.Errorf("bad event %q: %w", line, jerr)
			}
			switch ev.Type {
			case "init":
				onInit(ev.Text)
			case "stdout":
				fmt.Fprintln(stdout, ev.Text)
			case "stderr":
				fmt.Fprintln(stderr, ev.Text)
			case "execution_complete":
				return 0, nil
			case "error":
				if ev.Error == nil {
					return 1, errors.New("command failed")
				}
				if code, err := strconv.Atoi(ev.Error.Value); err == nil {
					return code, nil
				}
				return 1, fmt.Errorf("%s: %s", ev.Error.Name, ev.Error.Value)
			}
		}
		if err == io.EOF {
			return 1, errors.New("the command's stream ended without an exit code")
		}
		if err != nil {
			return 1, err
		}
	}
}

// shellCommand turns argv into the shell command line execd runs. One
// argument is taken as a command line as it is ("ls | wc -l"); several are
// quoted, so that they arrive as the same argv.
func shellCommand(argv []string) string {
	if len(argv) == 1 {
		return argv[0]
	}
	quoted := make([]string, len(argv))
	for i, a := range argv {
		quoted[i] = shellQuote(a)
	}
	return strings.Join(quoted, " ")
}

func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
