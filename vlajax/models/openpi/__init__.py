"""openpi's pi0 / pi0.5 families (`ModelConfig.family` 'pi0' / 'pi05') and their checkpoint import.

    model = vlajax.models.build_model(cfg)                  # Pi0(cfg) for the pi families
    params = openpi_params.from_openpi(tree, cfg, fresh)    # openpi's params -> ours (checked leaf by leaf)
    python -m vlajax.policies.import_openpi --checkpoint DIR --config pi05 --out OUT   # a whole checkpoint

`Pi0` has the VLA's methods (embed_prefix, prefix, velocity, value), so the flow head functions
in `vlajax.models.heads` run on it unchanged; parity with openpi's own code is tested against
`../shared/fixtures/openpi` (tests/models/test_openpi_parity.py). Modules: `siglip` (image
encoder), `gemma` (the two experts' joint transformer, LoRA), `pi0` (the policy network),
`openpi_params` (openpi's parameter names -> ours).
"""

from vlajax.models.openpi.pi0 import Pi0, PiCache

__all__ = ["Pi0", "PiCache"]
