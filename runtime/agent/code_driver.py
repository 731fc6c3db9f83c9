"""sandboxd's Python driver for /code, used when the sandbox runs no Jupyter.

The agent starts one driver per code context. Cells run in one namespace that
lives as long as the process. Requests arrive as JSON lines on fd 3
({"msg_id", "code"}); messages leave as JSON lines on fd 4, shaped like
Jupyter's iopub messages ({"parent", "msg_type", "content"}) so that the agent
translates both engines alike. Everything written to fds 1 and 2, by Python
or by child processes, is read back here and sent as "stream" messages, so
output is streamed as it is written and ordered before the cell's end.
"""

import ast
import base64
import codecs
import fcntl
import importlib.util
import io
import json
import linecache
import os
import select
import signal
import struct
import sys
import termios
import threading
import time
import traceback

REQUESTS, MESSAGES = 3, 4
BACKEND = "sandboxd_inline"


class Channel:
    """Sends messages to the agent. The lock also orders output before a
    cell's end (see drain)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.parent = ""

    def send(self, msg_type, content):
        with self.lock:
            self.send_locked(msg_type, content)

    def send_locked(self, msg_type, content):
        line = json.dumps({"parent": self.parent, "msg_type": msg_type, "content": content})
        data = (line + "\n").encode("utf-8", "replace")
        while data:
            data = data[os.write(MESSAGES, data):]


chan = Channel()


class Output:
    """Reads what is written to fds 1 and 2 and sends it as stream messages."""

    def __init__(self):
        self.readers = {}
        for fd, name in ((1, "stdout"), (2, "stderr")):
            r, w = os.pipe()
            os.dup2(w, fd)
            os.close(w)
            self.readers[r] = (name, codecs.getincrementaldecoder("utf-8")("replace"))
        # A line is one write, so that print() makes one chunk.
        sys.stdout.reconfigure(line_buffering=True, write_through=False)
        sys.stderr.reconfigure(line_buffering=True, write_through=False)
        threading.Thread(target=self.pump, daemon=True).start()

    def pump(self):
        while True:
            ready, _, _ = select.select(list(self.readers), [], [])
            with chan.lock:
                for fd in ready:
                    name, decoder = self.readers[fd]
                    text = decoder.decode(os.read(fd, 65536))
                    if text:
                        chan.send_locked("stream", {"name": name, "text": text})

    def drain(self):
        """Returns once everything written so far has been sent."""
        sys.stdout.flush()
        sys.stderr.flush()
        while True:
            with chan.lock:
                if all(pending(fd) == 0 for fd in self.readers):
                    return
            time.sleep(0.001)


def pending(fd):
    return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]


def figure_png(fig):
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def is_figure(value):
    mpl = sys.modules.get("matplotlib.figure")
    return mpl is not None and isinstance(value, mpl.Figure)


def show_figures():
    """Sends every open matplotlib figure as display data and closes it, as
    Jupyter's inline backend does."""
    if "matplotlib.pyplot" not in sys.modules:
        return
    from matplotlib._pylab_helpers import Gcf

    for manager in Gcf.get_all_fig_managers():
        fig = manager.canvas.figure
        chan.send("display_data", {"data": {"text/plain": repr(fig), "image/png": figure_png(fig)}, "metadata": {}})
    Gcf.destroy_all()


class InlineBackend:
    """The matplotlib backend of MPLBACKEND=module://sandboxd_inline: it draws
    with Agg and turns plt.show() into display data. It is made when
    matplotlib first loads it, so programs that never plot never import Agg."""

    def find_spec(self, name, path, target=None):
        if name != BACKEND:
            return None
        return importlib.util.spec_from_loader(name, self)

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        from matplotlib.backends import backend_agg

        module.FigureCanvas = backend_agg.FigureCanvasAgg
        module.FigureManager = backend_agg.FigureManager
        module.show = lambda *args, **kwargs: show_figures()


REPRS = (
    ("text/html", "_repr_html_"),
    ("text/markdown", "_repr_markdown_"),
    ("image/svg+xml", "_repr_svg_"),
    ("image/png", "_repr_png_"),
    ("image/jpeg", "_repr_jpeg_"),
    ("text/latex", "_repr_latex_"),
    ("application/json", "_repr_json_"),
)


def bundle(value):
    """The MIME bundle of a cell's value, like IPython's display formatter."""
    data = {"text/plain": repr(value)}
    if is_figure(value):
        data["image/png"] = figure_png(value)
        return data
    if isinstance(value, type):
        return data
    for mime, name in REPRS:
        try:
            method = getattr(value, name, None)
            out = method() if callable(method) else None
        except Exception:
            continue
        if isinstance(out, tuple):  # (data, metadata)
            out = out[0]
        if out is None:
            continue
        if isinstance(out, bytes):
            out = base64.b64encode(out).decode("ascii")
        data[mime] = out
    return data


class Kernel:
    def __init__(self):
        self.ns = {"__name__": "__main__", "__builtins__": __builtins__}
        self.count = 0
        self.running = False
        self.output = Output()
        signal.signal(signal.SIGINT, self.on_interrupt)

    def on_interrupt(self, signum, frame):
        # Between cells an interrupt has nothing to stop.
        if self.running:
            raise KeyboardInterrupt

    def serve(self):
        requests = os.fdopen(REQUESTS, "rb")
        while True:
            try:
                line = requests.readline()
            except KeyboardInterrupt:
                continue
            if not line:
                return
            req = json.loads(line)
            chan.parent = req["msg_id"]
            self.run(req["code"])

    def run(self, code):
        self.count += 1
        try:
            # An interrupt raises only between running = True and the
            # inner finally's first statement: the outer handler catches
            # every one of them, wherever it lands.
            try:
                self.running = True
                # Like Jupyter's execute_input: from now on the agent may
                # interrupt the cell (see runSlot.interruptOnStart).
                chan.send("execute_input", {"execution_count": self.count})
                self.execute(code)
                show_figures()
            finally:
                self.running = False
        except BaseException as e:
            self.output.drain()
            self.report(e)
        self.output.drain()
        chan.send("execute_reply", {"execution_count": self.count})
        chan.send("status", {"execution_state": "idle"})

    def execute(self, code):
        name = "<cell-%d>" % self.count
        linecache.cache[name] = (len(code), None, code.splitlines(True), name)
        tree = ast.parse(code, name, "exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        exec(compile(tree, name, "exec"), self.ns)
        if last is None:
            return
        value = eval(compile(last, name, "eval"), self.ns)
        if value is None:
            return
        self.ns["_"] = value
        data = bundle(value)
        if is_figure(value):
            import matplotlib.pyplot as plt

            plt.close(value)
        self.output.drain()
        chan.send("execute_result", {"execution_count": self.count, "data": data, "metadata": {}})

    def report(self, e):
        tb = e.__traceback__
        # Leave out the driver's own frames: the user's start at the cell.
        while tb is not None and not tb.tb_frame.f_code.co_filename.startswith("<cell-"):
            tb = tb.tb_next
        lines = traceback.format_exception(type(e), e, tb)
        chan.send("error", {"ename": type(e).__name__, "evalue": str(e), "traceback": lines})


def main():
    # Children of cells must not hold the protocol's pipes.
    os.set_inheritable(REQUESTS, False)
    os.set_inheritable(MESSAGES, False)
    sys.meta_path.append(InlineBackend())
    Kernel().serve()


main()
