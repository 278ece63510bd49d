"""What a cell leaves behind is bounded (issue 25, item 7): its threads end with it, and a reply frame it
forges does not put the host out of step with the driver.

Real bubblewrap sandboxes, as in test_sandbox.py (whose fixture asserts that they can run here).
"""

from __future__ import annotations

from tools.test_sandbox import run_cells


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
