"""What the benchmark scripts share (scripts/bench-serve.py, bench-serve-dcp.py, bench-prefix.py):
the percentile of a list, the events of a streamed response, and one dcp-vk-serve started on a free
port. Each script imports it from
its own folder (Python puts the script's folder first on sys.path). Only the standard library."""
import http.client
import os
import re
import signal
import subprocess
import tempfile
import time


def pct(xs, p, empty=None):
    """The p-th percentile of xs, interpolated linearly (numpy's default, as vLLM's benchmark);
    empty where xs is empty."""
    if not xs:
        return empty
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def sse_events(r):
    """The server-sent events of the streamed HTTP response r as they arrive: (time.perf_counter()
    when the read that completed it returned, the event's text without its blank line)."""
    buf = b""
    while True:
        data = r.read1(65536)
        if not data:
            return
        now = time.perf_counter()
        buf += data
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            yield now, ev.decode()


class Server:
    """One dcp-vk-serve from cmd (which says --port 0) on the free port its banner names; its stderr
    goes to a temporary log named from log_prefix. fail(msg) is called (and must not return) when
    the server exits before it listens or does not listen within 600 s. stop() sends SIGTERM and
    returns (exit code, or a string where it was killed; the log's text)."""

    def __init__(self, cmd, fail, log_prefix, env=None, poll_s=0.1):
        self.err = tempfile.NamedTemporaryFile(prefix=log_prefix, suffix=".log", delete=False)
        self.cmd = cmd
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.err, env=env)
        t0 = time.time()
        while True:
            text = self.log()
            m = re.search(r"listening on http://[^:]+:(\d+)", text)
            if m:
                self.port = int(m.group(1))
                self.banner = m.group(0) + text[m.end():].split("\n", 1)[0]
                break
            if self.proc.poll() is not None:
                fail(f"the server exited with {self.proc.returncode}: {' '.join(cmd)}\n{text}")
            if time.time() - t0 > 600:
                self.proc.kill()
                fail(f"the server did not listen within 600 s: {' '.join(cmd)}")
            time.sleep(poll_s)

    def log(self):
        with open(self.err.name, errors="replace") as f:
            return f.read()

    def get(self, path):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        c.request("GET", path)
        body = c.getresponse().read().decode()
        c.close()
        return body

    def metrics(self):
        """/metrics as {series name with its labels: value}."""
        out = {}
        for line in self.get("/metrics").splitlines():
            if line.startswith("#") or not line.strip():
                continue
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
        return out

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=300)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = "killed after 300 s"
        text = self.log()
        os.unlink(self.err.name)
        return code, text
