"""`python -m vlajax.quickstart`: runs `run` as the command (its own `__main__`)."""

import runpy

runpy.run_module("vlajax.quickstart.run", run_name="__main__", alter_sys=True)
