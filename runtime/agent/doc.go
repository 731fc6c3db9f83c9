// Package agent is the part of sandboxd that runs inside every sandbox
// (`sandboxd agent`). It serves the execd HTTP API natively: commands as
// process groups, bash sessions, PTYs, files, metrics and a reverse proxy to
// ports inside the sandbox. It listens on no port: HTTP travels over yamux
// streams multiplexed on the stdin and stdout of one Docker exec that
// sandboxd attaches (Dial on sandboxd's side). It needs nothing from the
// image: no shell for the file API, no writable filesystem, no network.
//
// # The agent daemon
//
// The API is served by a daemon that outlives the exec, so that background
// commands, their output, bash sessions, PTYs, code contexts and the
// activity count survive a restart or crash of sandboxd. The exec'd `sandboxd agent` (Main) only
// bridges its stdin and stdout to the daemon's abstract unix socket
// "@sandboxd-agent-v1", private to the sandbox's network namespace; if no
// daemon listens, it binds the socket itself (the bind is the lock between
// concurrent starters) and hands it to `sandboxd agent --daemon`, started in
// its own session with nothing of the exec. Every connection is a yamux
// session on the same state. When a connection ends, its requests end, and
// with them its foreground commands; everything else runs on. The daemon
// serves only processes of its own uid, and the bridge only a socket made by
// its own uid, since commands may run as other users. If the daemon is
// killed its state is lost, and the next exec starts a new one. If no daemon
// can be reached, `sandboxd agent` serves its connection itself (Run), with
// state that ends with the connection.
//
// # Differences from upstream execd
//
// The wire formats are execd's. Behaviour differs on purpose here:
//
//   - Output is read from pipes as it is written, not polled from temp files
//     every 100 ms, and the stream closes right after the last event instead
//     of one second later.
//   - A foreground command whose client disconnects is killed (its whole
//     process group), instead of running on unobserved.
//   - Scripts over 64 KiB reach the shell as a memory file, so commands are
//     not limited by the kernel's 128 KiB cap on one argument.
//   - Event text escapes U+0085 as well as U+2028 and U+2029, so clients that
//     split lines like Python's str.splitlines never cut an event.
//   - Background logs are addressed by line, as the API specification says
//     (execd's implementation uses bytes); an unfinished last line is shown
//     once the command has ended.
//   - In bash sessions, stdout and stderr stay separate events; a timeout
//     ends the run with error -1; interrupting a session (DELETE
//     /command?id=<session>) stops its running command but keeps the session.
//     Without bash, sh sessions keep their variables too.
//   - DELETE /command with an unknown id answers 404 CONTEXT_NOT_FOUND.
//   - Downloading a directory or another non-regular file answers 400
//     instead of failing halfway through the body.
//   - Uploads are streamed into a temp file next to the target and renamed
//     over it (not fsynced): a reader never sees half a file, and a symlink
//     at the target is replaced, not written through. New files get mode
//     0644 unless the metadata says otherwise; an existing file keeps its
//     mode and owner.
//   - A finished foreground command keeps its status but not its text; the
//     status of at most 1024 finished commands is kept.
//   - There is no isolator: GET /v1/isolated/capabilities says
//     available false and the other /v1/isolated routes answer 503.
//   - /code drives the sandbox's Jupyter server (JUPYTER_HOST and
//     JUPYTER_TOKEN in the agent's or PID 1's environment) over its REST API
//     and one kernel WebSocket per context, matching kernel messages to
//     their request; without Jupyter, if python3 exists, each context is a
//     Python process running the driver embedded from code_driver.py. Both
//     speak Jupyter's messages, which codeRun turns into execd's events:
//     display data (plt.show()) becomes results after the cell's value, an
//     error ends the stream without execution_complete, a run on a busy
//     context answers 409 CONTEXT_BUSY, an unknown context 404, an unknown
//     language 400, and a client that disconnects interrupts its run.
//   - The access token (sandboxd authenticates) is not supported.
//   - $EXECD_ENVS (default /tmp/.opensandbox/.env) is read by every
//     command and by each bash session when created, not by terminals.
package agent
