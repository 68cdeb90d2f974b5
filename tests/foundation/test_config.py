"""Config: presets, typo suggestions, validation before anything runs."""

import dataclasses

import pytest

from vlajax.config import schema as C


def test_presets_build_and_carry_their_name():
    for name in C.preset_names():
        cfg = C.get_config(name)
        assert cfg.name == name
        assert isinstance(cfg.mesh, C.MeshConfig)


def test_unknown_preset_suggests_closest():
    with pytest.raises(C.ConfigError, match=r"did you mean 'debug'"):
        C.get_config("debgu")
    with pytest.raises(C.ConfigError, match="available: "):
        C.get_config("zzzzzz")


def test_configs_are_frozen():
    cfg = C.get_config("debug")
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.seed = 3


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: C.TrainConfig(mesh=C.MeshConfig(dp=3), data=C.DataConfig(batch_size=8)), "not divisible by mesh.dp=3"),
        (lambda: C.TrainConfig(mesh=C.MeshConfig(tp=3)), r"num_heads=\d+ is not divisible by mesh.tp=3"),
        (lambda: C.MeshConfig(tp=0), "mesh.tp must be >= 1"),
        (lambda: C.MeshConfig(rules="nope"), "mesh.rules='nope' is unknown"),
        (lambda: C.MeshConfig(rule_overrides=("embed=xx",)), "axis must be one of"),
        (lambda: C.ModelConfig(image_size=30, patch_size=8), "must divide model.image_size"),
        (lambda: C.EnvConfig(render_backend="warp", physics_impl="jax"), "needs env.physics_impl='warp'"),
        (lambda: C.DistributedConfig(coordinator_address="h:1"), "needs distributed.num_processes"),
        (lambda: C.TrainConfig(rl=C.RLConfig(algo="grpo", group_size=5)), "not divisible by rl.group_size=5"),
    ],
)
def test_validation_fails_loudly(make, match):
    with pytest.raises(C.ConfigError, match=match):
        make()


def test_rule_overrides_amend_the_table():
    mesh = C.MeshConfig(rule_overrides=("embed=", "act_len=tp"))
    rules = dict(mesh.logical_rules)
    assert rules["embed"] is None
    assert rules["act_len"] == "tp"
    assert rules["mlp"] == "tp"  # untouched entries stay


def test_registry_rejects_duplicates():
    with pytest.raises(C.ConfigError, match="registered twice"):
        C.register("debug", "again")(lambda: C.TrainConfig())


def test_cluster_detection_from_environment():
    from vlajax.training.distributed import cluster_detected

    assert not cluster_detected({})
    assert cluster_detected({"JAX_COORDINATOR_ADDRESS": "10.0.0.1:1234"})
    assert cluster_detected({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "4"})
    assert not cluster_detected({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "1"})  # one task: single process
    assert cluster_detected({"OMPI_COMM_WORLD_SIZE": "2"})


def test_public_api_resolves_every_name():
    import vlajax

    for name in vlajax.__all__:
        assert getattr(vlajax, name) is not None, name


def test_every_config_field_has_a_comment():
    from vlajax.config.reference import field_comments, sections

    for cls in [C.TrainConfig] + [cls for _, cls in sections()]:
        comments = field_comments(cls)
        for f in dataclasses.fields(cls):
            if not dataclasses.is_dataclass(f.default):
                assert comments.get(f.name), f"{cls.__name__}.{f.name} has no comment"


def test_config_reference_doc_is_up_to_date():
    from vlajax.config.reference import DOC_PATH, render

    assert DOC_PATH.read_text() == render(), "run: python scripts/config_reference.py"
