"""`vlajax.training.logging.print_line`: a progress line and its newline in one write, so lines printed at once
from two threads (the async loop's heartbeat, a test driver's phase markers) never join into one."""

import subprocess
import sys

CHILD = r"""
import threading
from vlajax.training.logging import print_line
def spam(tag):
    for i in range(3000):
        print_line(f"{tag} {i} " + "x" * 60)
ts = [threading.Thread(target=spam, args=(t,)) for t in ("A", "B", "C")]
[t.start() for t in ts]
[t.join() for t in ts]
"""


def test_lines_from_threads_stay_whole():
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=True).stdout
    lines = out.splitlines()
    assert len(lines) == 9000
    bad = [ln for ln in lines if ln.count(" ") != 2 or ln[0] not in "ABC" or not ln.endswith("x" * 60)]
    assert not bad, bad[:3]
