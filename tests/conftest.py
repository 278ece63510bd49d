"""Session-wide test settings.

Servers started by the tests (in-process or as subprocesses) keep their SQLite store in a temporary data
directory, never in the home directory of whoever runs the tests.
"""

from __future__ import annotations

import os
import tempfile

# Digits only after a fixed prefix: some tests look for a secret's letters in repr(Config).
_data = os.path.join(tempfile.gettempdir(), f"harmony-responses-tests-{os.getpid()}")
os.environ["HARMONY_RESPONSES_DATA_DIR"] = os.path.join(_data, "data")
# Subprocess servers started with the HARMONY_RESPONSES_* variables removed still stay out of $HOME.
os.environ["XDG_DATA_HOME"] = os.path.join(_data, "xdg")
