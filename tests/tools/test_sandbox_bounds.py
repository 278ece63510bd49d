"""What a cell leaves behind is bounded (issue 25, items 7 and 8): its threads end with it, a reply frame it
forges does not put the host out of step with the driver, and the tmpfs mounts hold a bounded number of files.

Real bubblewrap sandboxes, as in test_sandbox.py (whose fixture asserts that they can run here).
"""

from __future__ import annotations

import dataclasses

from tools.test_sandbox import LIMITS, run_cells


def test_a_cells_threads_end_with_the_cell() -> None:
    busy, asleep, after = run_cells(
        # A thread spinning and printing: before, it went on using the CPU after the call returned, and its
        # lines came out in the next call's output.
        "import threading, time\n"
        "count = [0]\n"
        "def spin():\n"
        "    while True:\n"
        "        count[0] += 1\n"
        "        if count[0] % 100_000 == 0:\n"
        "            print('tick', flush=True)\n"
        "threading.Thread(target=spin, daemon=True).start()\n"
        "while count[0] < 100_000:\n"
        "    time.sleep(0.01)\n",
        # A thread asleep in C code when its cell returns: it ends as soon as it wakes, before its print.
        "stopped = count[0]\nthreading.Thread(target=lambda: (time.sleep(0.3), print('late', flush=True))).start()\n",
        "time.sleep(0.6)\nprint(count[0] == stopped, threading.active_count())\n",
    )
    assert [r.status for r in (busy, asleep, after)] == ["ok", "ok", "ok"]
    assert "tick" in busy.output
    assert after.output == "True 1\n", after.output  # no tick, no late line, no thread left


def test_a_forged_reply_frame_leaves_the_calls_in_step() -> None:
    # Code in the REPL's process can write a reply frame of the driver's shape. Before, the host took it for the
    # reply, then the driver's real one for the next call's, and so on: every later call answered with the
    # previous call's output.
    forge = (
        "import __main__, json, os, struct\n"
        "x = 'kept'\n"
        "for status in ('ok', 'error'):\n"
        "    frame = json.dumps({'status': status}).encode()\n"
        "    os.write(__main__.REPLY_FD, struct.pack('>I', len(frame)) + frame)\n"
        "print('first')\n"
    )
    results = run_cells(forge, "print('second')", "print('third', x)")
    assert [(r.status, r.output) for r in results] == [("ok", "first\n"), ("ok", "second\n"), ("ok", "third kept\n")]


def test_each_tmpfs_mount_holds_a_bounded_number_of_files() -> None:
    # Before, no inode cap: a million empty files in /tmp took ~700 MB of the host's memory, past the size cap.
    limits = dataclasses.replace(LIMITS, inodes=300)
    fill = (
        "import os\n"
        "for place in ('/tmp', '/mnt/data', '/dev/shm'):\n"
        "    made = 0\n"
        "    try:\n"
        "        while True:\n"
        "            open(f'{place}/f{made}', 'w').close()\n"
        "            made += 1\n"
        "    except OSError as exc:\n"
        "        print(place, made, exc.strerror)\n"
    )
    listed = "import os\nprint(sorted(os.listdir('/tmp'))[:2])\nos.remove('/tmp/f0')\nopen('/tmp/again', 'w').close()"
    filled, after = run_cells(fill, listed, limits=limits)
    lines = filled.output.splitlines()
    assert [line.split()[0] for line in lines] == ["/tmp", "/mnt/data", "/dev/shm"], filled.output
    for line in lines:
        place, made, error = line.split(" ", 2)
        assert 250 < int(made) < 300 and error == "No space left on device", line
    # The files made are there and the mount works on: one removed makes room for another.
    assert after.status == "ok" and after.output == "['f0', 'f1']\n", after.output


def test_the_cell_holds_no_capability() -> None:
    # The driver starts with CAP_SYS_ADMIN (in the sandbox's user namespace) to mount its capped tmpfs; a cell
    # must find none of it: no capability, no mounting, no unmounting the caps away.
    (result,) = run_cells(
        "import ctypes, os\n"
        "sets = ('CapInh', 'CapPrm', 'CapEff', 'CapAmb')\n"
        "caps = [l.split() for l in open('/proc/self/status') if l.startswith(sets)]\n"
        "print([int(v, 16) for _, v in caps])\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "print(libc.umount2(b'/tmp', 2), os.strerror(ctypes.get_errno()))\n"
        "print(libc.unshare(0x00020000), os.strerror(ctypes.get_errno()))\n"
        "print(libc.mount(b'tmpfs', b'/mnt/data', b'tmpfs', 0, b''), os.strerror(ctypes.get_errno()))\n"
    )
    assert result.output.splitlines() == [
        "[0, 0, 0, 0]",
        "-1 Operation not permitted",
        "-1 Operation not permitted",
        "-1 Operation not permitted",
    ], result.output
