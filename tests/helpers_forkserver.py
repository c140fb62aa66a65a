"""A fork server for the suite's plug-in fairseq runs: torch and fairseq imported once, then
every ``fairseq-TOOL ... --user-dir`` run a forked child of the server.

A fresh interpreter that imports torch and fairseq costs about 4.5 CPU-s on the suite's 2-core
machines, and the suite starts about seventy plug-in runs. A forked child does what the console
script would do, from the state a fresh process has after importing the same libraries:

- the server imports torch, fairseq and the plug-in's third-party libraries, never the plug-in
  itself, so ``--user-dir`` imports and registers it in the child exactly as in a fresh process;
  it imports no ``fairseq_cli`` module, and leaves the root logger unconfigured (a fairseq_cli
  module configures it, and the harness parses that format);
- the child takes the caller's stdin, stdout and stderr (the file descriptors themselves, sent
  over the server's socket), its working directory and environment, ``sys.argv`` with the
  console script as ``argv[0]`` (argparse's "fairseq-train: error:") and ``sys.path[0]`` as
  the script's, then emulates the interpreter's top level: ``SystemExit`` gives its code, any
  other exception goes to ``sys.excepthook`` (the plug-in's one-line hook) and exits 1;
  non-daemon threads are joined, atexit functions and logging shutdown run, streams flush.

Only runs that differ from a fresh process in nothing a test looks at are forked
(:func:`forkable`): runs without ``--user-dir`` (stock fairseq), distributed runs and runs of
anything but a fairseq console script start a new process. A server serves one start-up
environment (the variables but :data:`RUNTIME_VARIABLES`): thread counts and the OpenMP wait
policy are read when torch loads, so another environment gets its own server. Tests that must
see a real process start (kill -9 of a process tree, measurements, stock fairseq, commands run
as written) do not come here. ``FAIRSEQ_SHARED_FORKSERVER=0`` turns the server off.
"""

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading

#: Read while a run goes, not at interpreter start-up: may differ from the server's.
RUNTIME_VARIABLES = frozenset({"FAIRSEQ_SHARED_DEBUG", "PYTEST_CURRENT_TEST", "PYTEST_XDIST_WORKER",
                               "PYTEST_XDIST_TESTRUNUID", "PYTEST_XDIST_WORKER_COUNT"})
#: Libraries a plug-in run imports; importing them is the start-up the server saves.
#: torch._dynamo is imported lazily by the first optimizer built (torch.optim's
#: ``_disable_dynamo``): 2.2 of a forked toy fairseq-train's 4 CPU-s on this machine.
PRELOAD = (
    "torch", "torch._dynamo", "numpy", "fairseq", "fairseq.options", "fairseq.tasks",
    "fairseq.models", "fairseq.checkpoint_utils", "fairseq.trainer", "fairseq.sequence_generator",
    "fairseq.data", "fairseq.logging.progress_bar", "sacrebleu", "sentencepiece",
)
#: fairseq console script -> the module whose ``cli_main`` it runs.
MODULES = {
    "fairseq-train": "fairseq_cli.train", "fairseq-generate": "fairseq_cli.generate",
    "fairseq-preprocess": "fairseq_cli.preprocess", "fairseq-interactive": "fairseq_cli.interactive",
    "fairseq-validate": "fairseq_cli.validate", "fairseq-eval-lm": "fairseq_cli.eval_lm",
}
_MESSAGE = 1 << 20


def enabled() -> bool:
    return os.environ.get("FAIRSEQ_SHARED_FORKSERVER", "1") != "0"


def forkable(cmd) -> bool:
    """Whether CMD may run as a fork: a fairseq console script run with the plug-in that
    starts no workers of its own (fairseq's ``--distributed-world-size`` workers are
    multiprocessing spawns, which start from the parent's ``__main__``: the server's)."""
    args = [str(a) for a in cmd[1:]]
    return (enabled() and os.path.basename(str(cmd[0])) in MODULES and "--user-dir" in args
            and "--distributed-world-size" not in args)


def _startup(env) -> str:
    return json.dumps(sorted((k, v) for k, v in env.items() if k not in RUNTIME_VARIABLES))


class ForkedProcess:
    """The part of ``subprocess.Popen`` the suite and the harness use, for a forked run."""

    def __init__(self, server, pid, args):
        self.server, self.pid, self.args, self.returncode = server, pid, args, None

    def poll(self):
        if self.returncode is None:
            self.returncode = self.server.status(self.pid, block=False)
        return self.returncode

    def wait(self, timeout=None):
        if self.returncode is None:
            self.returncode = self.server.status(self.pid, timeout=timeout)
            if self.returncode is None:
                raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def send_signal(self, sig):
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self):
        self.send_signal(signal.SIGKILL)

    def terminate(self):
        self.send_signal(signal.SIGTERM)


class ForkServer:
    """One server process for one start-up environment; its children run concurrently."""

    def __init__(self, env):
        self.env = dict(env)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), str(theirs.fileno())],
                                     env=self.env, pass_fds=[theirs.fileno()])
        theirs.close()
        self.sock = ours
        self.statuses, self.closed = {}, False
        self.changed = threading.Condition()
        self.starting = threading.Lock()
        self.started = None
        threading.Thread(target=self._read_replies, daemon=True).start()

    def _read_replies(self):
        while True:
            try:
                message = self.sock.recv(_MESSAGE)
            except OSError:
                message = b""
            with self.changed:
                if not message:
                    self.closed = True
                else:
                    reply = json.loads(message)
                    if "started" in reply:
                        self.started = reply["started"]
                    else:
                        self.statuses[reply["pid"]] = reply["status"]
                self.changed.notify_all()
            if not message:
                return

    def alive(self) -> bool:
        return not self.closed and self.proc.poll() is None

    def popen(self, cmd, env, stdin, stdout, stderr, cwd=None) -> ForkedProcess:
        """Start CMD as a fork with these file descriptors as its fds 0, 1 and 2."""
        request = {"argv": [str(a) for a in cmd], "module": MODULES[os.path.basename(str(cmd[0]))],
                   "env": dict(env), "cwd": os.path.abspath(cwd or os.getcwd())}
        with self.starting:
            with self.changed:
                self.started = None
            socket.send_fds(self.sock, [json.dumps(request).encode()], [stdin, stdout, stderr])
            with self.changed:
                self.changed.wait_for(lambda: self.started is not None or self.closed)
                if self.started is None:
                    raise RuntimeError(f"the fork server exited (status {self.proc.wait()})")
                return ForkedProcess(self, self.started, list(cmd))

    def status(self, pid, block=True, timeout=None):
        """PID's exit status as subprocess gives it; None if it has not ended (yet)."""
        with self.changed:
            if block:
                self.changed.wait_for(lambda: pid in self.statuses or self.closed, timeout)
            if pid not in self.statuses and self.closed:
                raise RuntimeError(f"the fork server exited before run {pid} ended")
            return self.statuses.pop(pid, None)

    def run(self, cmd, env, timeout=None, input=None) -> subprocess.CompletedProcess:
        """``subprocess.run(cmd, capture_output=True, text=True, ...)`` as a fork."""
        with tempfile.TemporaryFile("w+") as fin, tempfile.TemporaryFile("w+") as fout, \
                tempfile.TemporaryFile("w+") as ferr:
            fin.write(input or "")
            fin.flush()
            fin.seek(0)
            proc = self.popen(cmd, env, fin.fileno(), fout.fileno(), ferr.fileno())
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise
            fout.seek(0)
            ferr.seek(0)
            return subprocess.CompletedProcess(list(cmd), proc.returncode, fout.read(), ferr.read())


_SERVERS = {}
_SERVERS_LOCK = threading.Lock()


def server_for(env) -> ForkServer:
    """This process's server for ENV's start-up variables, started on first use."""
    key = _startup(env)
    with _SERVERS_LOCK:
        server = _SERVERS.get(key)
        if server is None or not server.alive():
            server = _SERVERS[key] = ForkServer(env)
        return server


def run(cmd, env, timeout=None, input=None) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, env=env, capture_output=True, text=True, ...)``: forked where
    :func:`forkable`, else a new process."""
    if forkable(cmd):
        return server_for(env).run(cmd, env, timeout, input)
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout,
                          input=input)


def popen(cmd, stdin=None, stdout=None, stderr=None, env=None, cwd=None, **options):
    """``subprocess.Popen`` for file descriptors or files (no pipes): forked where
    :func:`forkable`; ``preexec_fn`` and ``close_fds`` are moot for a fork (its parent is the
    server, and it holds only fds 0-2 and the server's own)."""
    if not forkable(cmd):
        return subprocess.Popen(cmd, stdin=stdin, stdout=stdout, stderr=stderr, env=env, cwd=cwd,
                                **options)
    def fd(stream, default):
        if stream is None:
            return default
        if subprocess.PIPE == stream or subprocess.DEVNULL == stream:
            raise ValueError("the fork server takes files, not pipes")
        return stream if isinstance(stream, int) else stream.fileno()
    with open(os.devnull) as devnull:
        out = fd(stdout, 1)
        err = out if stderr == subprocess.STDOUT else fd(stderr, 2)
        return server_for(env or os.environ).popen(cmd, env or os.environ, fd(stdin, devnull.fileno()),
                                                   out, err, cwd)


class _Subprocess:
    """The ``subprocess`` module as a module of the harness sees it under :func:`harness_runs`."""
    Popen = staticmethod(popen)

    @staticmethod
    def run(cmd, capture_output=False, text=False, env=None, timeout=None, input=None, **options):
        if capture_output and text and not options:
            return run(cmd, env or os.environ, timeout, input)
        return subprocess.run(cmd, capture_output=capture_output, text=text, env=env,
                              timeout=timeout, input=input, **options)

    def __getattr__(self, name):
        return getattr(subprocess, name)


@contextlib.contextmanager
def harness_runs():
    """Within: the fairseq-train runs of :mod:`harness.training` and the fairseq-validate runs
    of :mod:`harness.valid_loss` started from this process are forks."""
    from unittest import mock

    from harness import training, valid_loss

    shim = _Subprocess()
    with mock.patch.object(training, "subprocess", shim), mock.patch.object(valid_loss, "subprocess", shim):
        yield


# --- the server side ---------------------------------------------------------------------------

def _exit_code(code) -> int:
    """The status the interpreter gives ``raise SystemExit(code)`` at top level."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _child(request, fds) -> None:
    """In the forked child: become the console script run with REQUEST; never returns."""
    import atexit
    import importlib
    import logging

    status = 1
    try:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        sys.argv = list(request["argv"])
        sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))  # as for the console script
        try:
            status = _exit_code(importlib.import_module(request["module"]).cli_main())
        except SystemExit as exit_:
            status = _exit_code(exit_.code)
        except BaseException:
            sys.excepthook(*sys.exc_info())
            status = 1
        for thread in threading.enumerate():  # the interpreter joins them before atexit
            if thread is not threading.main_thread() and not thread.daemon:
                thread.join()
        atexit._run_exitfuncs()
        logging.shutdown()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(status)


def serve(sock) -> None:
    """Fork one child per request (a JSON message with fds 0-2 attached); tell the client its
    pid at once and its exit status when it ends. When the client goes, its children go too."""
    import importlib
    import logging

    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)  # what the libraries print at import goes to stderr, not into a run's output
    for name in PRELOAD:
        importlib.import_module(name)
    # a library's module-level logging.info configured the root logger on import; a fairseq_cli
    # module configures it first in a fresh process (its format is what the harness parses)
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    root.setLevel(logging.WARNING)
    children = {}  # pidfd -> pid
    while True:
        ready, _, _ = select.select([sock, *children], [], [])
        for fd in ready:
            if fd is sock:
                message, fds, _, _ = socket.recv_fds(sock, _MESSAGE, 3)
                if not message:
                    for pid in children.values():
                        os.kill(pid, signal.SIGKILL)
                    return
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    sock.close()
                    for pidfd in children:
                        os.close(pidfd)
                    _child(json.loads(message), fds)
                for received in fds:
                    os.close(received)
                children[os.pidfd_open(pid)] = pid
                sock.send(json.dumps({"started": pid}).encode())
            else:
                pid = children.pop(fd)
                os.close(fd)
                _, status = os.waitpid(pid, 0)
                sock.send(json.dumps({"pid": pid, "status": os.waitstatus_to_exitcode(status)}).encode())


if __name__ == "__main__":
    serve(socket.socket(fileno=int(sys.argv[1])))
