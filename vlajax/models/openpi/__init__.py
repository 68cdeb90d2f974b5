"""openpi's pi0 / pi0.5 families (`ModelConfig.family` 'pi0' / 'pi05') and their checkpoint import.

    model = vlajax.models.build_model(cfg)          # Pi0(cfg) for the pi families
    params = openpi_params.from_openpi(tree, cfg)   # openpi's params layout -> ours (checked leaf by leaf)

The module has the VLA's methods (embed_prefix, prefix, velocity, value), so the flow head
functions in `vlajax.models.heads` run on it unchanged. See docs/models.md.
"""

from vlajax.models.openpi.pi0 import Pi0, PiCache

__all__ = ["Pi0", "PiCache"]
