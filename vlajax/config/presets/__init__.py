"""Named presets, one module per family (sft.py, rl.py, experiments ...).

Every module in this package is imported the first time the registry is read
(`vlajax.config.schema.get_config` / `preset_names`), so a module only needs
`@vlajax.config.schema.register(name, description)` on a function returning a `TrainConfig`.
"""

import importlib
import pkgutil


def load_all() -> None:
    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")
