"""The REPL that runs *inside* the sandbox: one persistent Python process per container, fed cells by the host.

This file is not imported by the server: its source is handed to the sandbox's ``python3 -I -c`` (see
``_sandbox.py``), so it must stand alone (standard library only, Python 3.8+ for older system interpreters).

Protocol (file descriptors set up by the host):

- argv: ``WORKDIR CMD_FD REPLY_FD SCOPE [MOUNTS]``; SCOPE says which processes are the cells' (see below):
  ``namespace`` (bwrap: the driver's own PID namespace) or ``session`` (unsafe mode: the driver's session).
  MOUNTS (bwrap only): JSON ``[[path, size_bytes, inodes, mode], …]``, the capped tmpfs mounts to make
  before any cell runs (below).
- CMD_FD: commands, host → driver: 4-byte big-endian length + UTF-8 JSON ``{"code": str, "cpu": seconds,
  "wall": seconds, "nonce": str}``.
- REPLY_FD: replies, driver → host: the same framing, ``{"status": "ok" | "error" | "timeout" | "cpu",
  "nonce": str}``, sent once the cell has finished and its output is flushed. The cell runs in this process
  and can write to REPLY_FD too; the nonce, new for every call, is how the host tells the driver's reply
  from a frame the cell wrote (it ignores any other), so that a forged frame cannot put the host a reply
  ahead of the driver for good. (A cell that digs this call's nonce out of the driver's frames can end its
  own call early, nothing more: the next call's reply carries another.)
- fd 1 and 2: the cell's output (both go to one pipe the host reads and caps); stdin is /dev/null.

Capped mounts: bwrap's ``--tmpfs`` takes a size but no inode count, and a tmpfs file costs kernel memory
(~700 bytes) that its size cap does not count: a million empty files took ~700 MB. So bwrap starts the
driver with CAP_SYS_ADMIN (in the sandbox's own user namespace: no power outside it), and the driver, before
anything else, enters a mount namespace of its own, mounts each tmpfs again over bwrap's with ``size`` and
``nr_inodes``, and drops every capability; it refuses to run any cell when that fails.

Like a notebook: variables persist between cells, the value of a cell's last expression is printed, and
an exception in user code prints its traceback (the driver's own frames left out) and the REPL goes on.
Limits the driver enforces itself, so that a cell that overruns loses only that cell, not the container's
state: wall time (SIGALRM raises ``TimeoutError`` in the cell) and CPU time (the soft RLIMIT_CPU is moved
to "used so far + this cell's allowance"; SIGXCPU raises in the cell). The host keeps a harder deadline
and kills the whole sandbox if a cell ignores these.

Processes a cell starts end with the cell: before replying, the driver kills every other process of the
sandbox (in the PID namespace, all but bwrap's init and itself; unsafe, those of its session). Threads a
cell starts end with it too: Python cannot kill a thread, but it can raise an exception in one at its next
bytecode (``PyThreadState_SetAsyncExc``), so the driver raises ``SystemExit`` in every thread but its own
and gives them ``THREAD_GRACE`` seconds to unwind. One blocked in C code (a sleep, a read, a lock) keeps the
exception pending and ends as soon as it runs Python again, without printing another line. And between
calls nothing of the cell's runs Python at all: the driver waits for the next command holding the
interpreter lock (a read through ``ctypes.PyDLL``, which keeps it), so even a thread that catches
``SystemExit`` is frozen until the next call (whose end raises it again). So a thread pool kept across cells
loses its workers: create it in the cell that uses it (``with ThreadPoolExecutor() as pool:``).
"""

import _thread
import ast
import json
import linecache
import os
import resource
import signal
import struct
import sys
import time
import traceback

try:
    import ctypes
except ImportError:  # an interpreter built without it: no freezing, no thread stopping (and no capped mounts)
    ctypes = None

CMD_FD = REPLY_FD = -1  # set from argv by main()
SCOPE = "namespace"
MAIN_THREAD = _thread.get_ident()
THREAD_GRACE = 0.1  # seconds a cell's threads get to unwind from SystemExit before the reply goes


class _CellTimeout(BaseException):
    """Raised by SIGALRM; BaseException so that a bare ``except Exception`` in user code does not swallow it."""


class _CellCPU(BaseException):
    """Raised by SIGXCPU (the cell's CPU allowance is spent)."""


def _on_alarm(signum, frame):
    raise _CellTimeout()


def _on_xcpu(signum, frame):
    raise _CellCPU()


def _gil_holding_read():
    """``read(fd, n)`` that keeps the interpreter lock while it waits (see the module docstring), or os.read."""
    if ctypes is None:
        return os.read
    try:
        libc = ctypes.PyDLL(None, use_errno=True)  # PyDLL: the lock is not released around the call
        call = libc.read
    except (OSError, AttributeError):
        return os.read
    call.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t)
    call.restype = ctypes.c_ssize_t

    def read(fd, n):
        buffer = ctypes.create_string_buffer(n)
        while True:
            got = call(fd, buffer, n)
            if got >= 0:
                return buffer.raw[:got]
            error = ctypes.get_errno()
            if error != 4:  # EINTR: a signal (SIGCHLD) arrived, read on
                raise OSError(error, os.strerror(error))

    return read


_read = os.read  # replaced in main()


def _read_exact(fd, n):
    data = b""
    while len(data) < n:
        chunk = _read(fd, n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _read_command():
    header = _read_exact(CMD_FD, 4)
    if header is None:
        return None
    (length,) = struct.unpack(">I", header)
    body = _read_exact(CMD_FD, length)
    return None if body is None else json.loads(body.decode("utf-8"))


def _reply(obj):
    data = json.dumps(obj).encode("utf-8")
    os.write(REPLY_FD, struct.pack(">I", len(data)) + data)


def _cpu_used():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _set_cpu_allowance(seconds):
    soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    want = int(_cpu_used()) + max(1, int(seconds)) + 1
    if hard != resource.RLIM_INFINITY:
        want = min(want, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (want, hard))


def _print_traceback(exc, skip):
    tb = exc.__traceback__
    for _ in range(skip):
        if tb is not None:
            tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb)


def _leftovers():
    """The live processes of the sandbox other than this one (and, in a PID namespace, its init)."""
    me = os.getpid()
    session = os.getsid(0)
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        if pid == me or (SCOPE == "namespace" and pid == 1):
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2 :].split()
        if fields[0] in (b"Z", b"X"):  # already dead, waiting to be reaped
            continue
        if SCOPE == "session" and int(fields[3]) != session:
            continue  # unsafe mode: only what our session started is ours to end
        found.append(pid)
    return found


def _other_threads():
    return [ident for ident in sys._current_frames() if ident != MAIN_THREAD]


def _stop_threads():
    """End the threads the cell started (see the module docstring)."""
    if ctypes is None:
        return
    raise_in = ctypes.pythonapi.PyThreadState_SetAsyncExc
    raise_in.argtypes = (ctypes.c_ulong, ctypes.py_object)
    threads = _other_threads()
    for ident in threads:
        raise_in(ident, SystemExit)
    deadline = time.monotonic() + THREAD_GRACE
    while threads and time.monotonic() < deadline:
        time.sleep(0.002)  # lets them run (and end)
        alive = set(_other_threads())
        threads = [ident for ident in threads if ident in alive]


def _isolate_mounts(mounts):
    """Mount each ``(path, size, inodes, mode)`` tmpfs over bwrap's, in a mount namespace of our own, then drop
    every capability; raises OSError when any step fails (no cell may run then)."""
    if ctypes is None:
        raise OSError("the sandbox's Python has no ctypes: cannot cap its tmpfs mounts")
    libc = ctypes.CDLL(None, use_errno=True)

    def check(result, what):
        if result != 0:
            error = ctypes.get_errno()
            raise OSError(error, f"{what}: {os.strerror(error)}")

    check(libc.unshare(0x00020000), "unshare(CLONE_NEWNS)")
    for path, size, inodes, mode in mounts:
        data = f"size={int(size)},nr_inodes={int(inodes)},mode={mode}".encode()
        check(libc.mount(b"tmpfs", path.encode(), b"tmpfs", 2 | 4, data), f"mount tmpfs on {path}")  # nosuid, nodev
    # PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL (prctl takes unsigned longs)
    check(libc.prctl(*(ctypes.c_ulong(v) for v in (47, 4, 0, 0, 0))), "clear the ambient capabilities")

    class Header(ctypes.Structure):
        _fields_ = (("version", ctypes.c_uint32), ("pid", ctypes.c_int))

    class Data(ctypes.Structure):
        _fields_ = (("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32))

    none = (Data * 2)()
    version_3 = 0x20080522  # _LINUX_CAPABILITY_VERSION_3: two 32-bit words per set
    check(libc.capset(ctypes.byref(Header(version_3, 0)), none), "drop the capabilities")
    with open("/proc/self/status") as f:
        held = [line.split() for line in f if line.startswith(("CapInh:", "CapPrm:", "CapEff:", "CapAmb:"))]
    if len(held) != 4 or any(int(value, 16) for _, value in held):
        raise OSError(f"capabilities still held after dropping them: {held}")


def _end_leftovers():
    """Kill what the cell started (a process may fork while we look: repeat until none is left)."""
    for _ in range(100):
        pids = _leftovers()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        while True:  # reap our own children, so that they do not linger as zombies
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
        if not pids:
            return
        time.sleep(0.002)


def _run_cell(code, number, namespace):
    filename = f"<cell {number}>"
    # Registered so that tracebacks show the cell's source lines.
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    try:
        tree = ast.parse(code, filename, "exec")
    except SyntaxError as exc:
        traceback.print_exception(type(exc), exc, None)
        return "error"
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    try:
        exec(compile(tree, filename, "exec"), namespace)
        if last is not None:
            value = eval(compile(last, filename, "eval"), namespace)
            if value is not None:
                namespace["_"] = value
                print(repr(value))
    except _CellTimeout:
        return "timeout"
    except _CellCPU:
        return "cpu"
    except SystemExit as exc:
        # exit() in a notebook cell does not end the kernel here either: say so and go on.
        print(f"SystemExit: {exc.code}", file=sys.stderr)
        return "error"
    except BaseException as exc:  # any failure of user code is the cell's result
        _print_traceback(exc, 1)
        return "error"
    return "ok"


def main():
    global CMD_FD, REPLY_FD, SCOPE, _read
    workdir, CMD_FD, REPLY_FD = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    SCOPE = sys.argv[4] if len(sys.argv) > 4 else "namespace"
    if len(sys.argv) > 5:
        try:
            _isolate_mounts(json.loads(sys.argv[5]))
        except OSError as exc:
            print(f"sandbox setup failed: {exc}", file=sys.stderr, flush=True)
            sys.exit(3)
    _read = _gil_holding_read()
    for fd in (CMD_FD, REPLY_FD):
        os.set_inheritable(fd, False)  # user code's subprocesses must not talk to the host
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.chdir(workdir)
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.signal(signal.SIGXCPU, _on_xcpu)
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    sys.argv = [""]
    number = 0
    while True:
        command = _read_command()
        if command is None:
            return
        number += 1
        nonce = command.pop("nonce", None)
        _set_cpu_allowance(command.get("cpu", 60))
        signal.setitimer(signal.ITIMER_REAL, float(command.get("wall", 60)))
        try:
            status = _run_cell(command["code"], number, namespace)
        except (_CellTimeout, _CellCPU) as exc:  # raised between the cell's end and the disarm below
            status = "timeout" if isinstance(exc, _CellTimeout) else "cpu"
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        try:
            _stop_threads()
            _end_leftovers()
        except (Exception, _CellTimeout, _CellCPU):  # never lose the REPL over its cleanup: the host's bounds remain
            pass
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # a closed or broken stream must not end the REPL
                pass
        _reply({"status": status, "nonce": nonce})


main()
