"""The task suite: 3 LIBERO-like suites x 4 tasks over 4 skill families, their success predicates and
shaped reward terms.

- spatial: three identical cubes in a row; the instruction picks one by position.
- object: three differently coloured cubes at random slots; the instruction names the target's colour.
- goal: one fixed layout (cubes, square, button); the tasks differ by goal.

Every task uses the same scene; cube 0/1/2 play fixed roles per task (`target`, `ref`), and the
layout and colours put them where the instruction says.
"""

from __future__ import annotations

import dataclasses
import itertools

import jax
import jax.numpy as jnp

from vlajax.envs.tabletop import scene

FAMILIES = ("pick_place", "push", "stack", "press")
# Shaped terms that carry signal in each family (in addition to the sparse `success`).
FAMILY_TERMS = {
    "pick_place": ("reach", "lift", "place"),
    "push": ("reach", "place"),
    "stack": ("reach", "lift", "place"),
    "press": ("reach", "press"),
}


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """One task: its skill family, instruction template, layout and randomization choices."""

    name: str  # "<suite>/<task>"
    family: str  # one of FAMILIES
    template: str  # instruction with {target}, {ref}, {zone} colour names
    layout: str  # "random" | "row" | "fixed" (see scene.sample_layout)
    target: int = 0  # the cube the instruction is about
    ref: int = 1  # stack: the cube to stack on
    row_slots: tuple[int, int, int] = (0, 1, 2)  # row layout: slot (0 left .. 2 right) of cube 0, 1, 2
    fixed_target_color: int | None = None  # palette index the target always has
    same_cube_color: bool = False  # all cubes share one (random) colour
    # held-out rewordings of `template` (the `language` perturbation axis, `vlajax.envs.perturb`):
    # paraphrase k is language level k + 1; never used by demos, SFT or training-time randomization
    paraphrases: tuple[str, ...] = ()

    def __post_init__(self):
        if self.family not in FAMILIES:
            raise ValueError(f"task {self.name}: family {self.family!r} not in {FAMILIES}")
        if len(self.paraphrases) != NUM_PARAPHRASES:
            raise ValueError(f"task {self.name}: needs {NUM_PARAPHRASES} held-out paraphrases")

    @property
    def suite(self) -> str:
        return self.name.split("/")[0]

    def instruction(self, colors, paraphrase: int = 0) -> str:
        """The instruction for palette indices `colors` = (cube0, cube1, cube2, zone); `paraphrase`
        k > 0 words it with the k-th held-out paraphrase instead of the training template."""
        names = [scene.COLOR_NAMES[int(c)] for c in colors]
        template = self.paraphrases[paraphrase - 1] if paraphrase else self.template
        return template.format(target=names[self.target], ref=names[self.ref], zone=names[3])

    def instructions(self) -> tuple[str, ...]:
        """All instructions, indexed by `instruction_id` (see `instruction_id`): the
        `NUM_INSTRUCTIONS` training ones, then the same colour combinations worded by each
        held-out paraphrase (id + k * NUM_INSTRUCTIONS for paraphrase k)."""
        n = len(scene.PALETTE)
        out = []
        for k in range(NUM_PARAPHRASES + 1):
            for t, r, z in itertools.product(range(n), repeat=3):
                colors = [0, 0, 0, z]
                colors[self.ref], colors[self.target] = r, t
                out.append(self.instruction(colors, k))
        return tuple(out)



NUM_PARAPHRASES = 2  # held-out paraphrases per task (language levels 1 and 2)
NUM_INSTRUCTIONS = len(scene.PALETTE) ** 3  # training instructions per task (target x ref x zone colour)

_PICK = "pick up the {side} {{target}} cube and place it in the {{zone}} square"
_PICK_PARA = ("grab the {side} {{target}} block and put it in the {{zone}} square",
              "the {{zone}} square is the goal for the {{target}} cube on the {far} side")
TASKS: tuple[TaskSpec, ...] = (
    # Spatial: same objects (identical cubes), different layouts; the target is named by position.
    TaskSpec("spatial/pick_left_place", "pick_place", _PICK.format(side="leftmost"), "row",
             row_slots=(0, 1, 2), same_cube_color=True,
             paraphrases=tuple(p.format(side="leftmost", far="left") for p in _PICK_PARA)),
    TaskSpec("spatial/pick_right_place", "pick_place", _PICK.format(side="rightmost"), "row",
             row_slots=(2, 0, 1), same_cube_color=True,
             paraphrases=tuple(p.format(side="rightmost", far="right") for p in _PICK_PARA)),
    TaskSpec("spatial/push_middle", "push", "push the middle {target} cube into the {zone} square", "row",
             row_slots=(1, 0, 2), same_cube_color=True,
             paraphrases=("slide the middle {target} block into the {zone} square",
                          "the {target} cube in the center goes into the {zone} square")),
    TaskSpec("spatial/stack_left_on_right", "stack", "put the leftmost {target} cube on the rightmost one",
             "row", row_slots=(0, 2, 1), same_cube_color=True,
             paraphrases=("place the leftmost {target} block on top of the rightmost one",
                          "move the {target} cube on the left onto the right one")),
    # Object: different target objects (by colour) among random distractors.
    *(
        TaskSpec(f"object/pick_{c}", "pick_place", "pick up the {target} cube and place it in the {zone} square",
                 "random", fixed_target_color=scene.COLOR_NAMES.index(c),
                 paraphrases=("grab the {target} block and put it in the {zone} square",
                              "find the {target} cube and move it into the {zone} square"))
        for c in ("red", "green", "blue", "yellow")
    ),
    # Goal: same layout, different goals.
    TaskSpec("goal/put_in_square", "pick_place", "put the {target} cube in the {zone} square", "fixed", target=0,
             paraphrases=("place the {target} block inside the {zone} square",
                          "the {zone} square is the goal for the {target} cube")),
    TaskSpec("goal/push_to_square", "push", "push the {target} cube into the {zone} square", "fixed", target=1,
             paraphrases=("slide the {target} block into the {zone} square",
                          "move the {target} cube to the {zone} square without a grasp")),
    TaskSpec("goal/stack", "stack", "stack the {target} cube on the {ref} cube", "fixed", target=2, ref=0,
             paraphrases=("put the {target} block on top of the {ref} block",
                          "the {target} cube goes on top of the {ref} one")),
    TaskSpec("goal/press_button", "press", "press the button", "fixed",
             paraphrases=("push the button down", "hold down the button")),
)


LAYOUTS = ("random", "row", "fixed")


def task_table() -> dict[str, jax.Array]:
    """Every task's parameters as arrays `[num_tasks, ...]`, so one compiled step serves all tasks."""
    return {
        "family": jnp.asarray([FAMILIES.index(t.family) for t in TASKS], jnp.int32),
        "target": jnp.asarray([t.target for t in TASKS], jnp.int32),
        "ref": jnp.asarray([t.ref for t in TASKS], jnp.int32),
        "layout": jnp.asarray([LAYOUTS.index(t.layout) for t in TASKS], jnp.int32),
        "row_slots": jnp.asarray([t.row_slots for t in TASKS], jnp.int32),
        "fixed_color": jnp.asarray([-1 if t.fixed_target_color is None else t.fixed_target_color for t in TASKS],
                                   jnp.int32),
        "same_color": jnp.asarray([t.same_cube_color for t in TASKS], bool),
    }


def task_params(task_id: jax.Array) -> dict[str, jax.Array]:
    """One task's parameters (`task_id` may be traced)."""
    return jax.tree.map(lambda x: x[task_id], task_table())


def push_point(cube_xy: jax.Array, zone_xy: jax.Array, offset: float) -> jax.Array:
    """xy `[2]` at `offset` behind the cube on the line from the square's centre through the cube."""
    d = zone_xy - cube_xy
    d = d / jnp.maximum(jnp.linalg.norm(d), 1e-6)
    return cube_xy - offset * d


TERMS = ("reach", "lift", "place", "press")  # union of FAMILY_TERMS; a family's unused terms are 0


def evaluate(params, ee, fingers, cubes, zone_xy, button_xy, button_q):
    """Success and shaped terms for one env of task `params` (see `task_params`).

    ee `[3]` fingertip centre, fingers `[2]` finger joint values, cubes `[3, 3]` positions,
    zone_xy `[2]`, button_xy `[2]`, button_q `[]` ->
    (success `[]` bool, {term: `[]` float32 in [0, 1] for term in TERMS}).
    """
    tgt, ref = cubes[params["target"]], cubes[params["ref"]]
    closeness = lambda d: 1.0 - jnp.tanh(10.0 * d)
    resting = tgt[2] < scene.CUBE_HALF + 0.008
    in_zone = jnp.all(jnp.abs(tgt[:2] - zone_xy) < scene.ZONE_HALF - 0.012) & resting
    lift = jnp.clip((tgt[2] - scene.CUBE_HALF) / 0.08, 0.0, 1.0)
    reach_cube = closeness(jnp.linalg.norm(ee - tgt))
    place_zone = closeness(jnp.linalg.norm(tgt[:2] - zone_xy))
    zero = jnp.float32(0.0)
    # pick_place
    pick = (in_zone, {"reach": reach_cube, "lift": lift, "place": place_zone, "press": zero})
    # push: reach the point behind the cube, at pushing height
    pp = push_point(tgt[:2], zone_xy, scene.CUBE_HALF + 0.01)
    push_reach = closeness(jnp.linalg.norm(ee[:2] - pp) + jnp.abs(ee[2] - 0.012))
    push = (in_zone, {"reach": push_reach, "lift": zero, "place": place_zone, "press": zero})
    # stack: on top of ref, centred, and released
    dz = tgt[2] - ref[2]
    released = jnp.min(fingers) > scene.CUBE_HALF + 0.006
    stacked = (jnp.linalg.norm(tgt[:2] - ref[:2]) < 0.02) & (jnp.abs(dz - 2 * scene.CUBE_HALF) < 0.006) & released
    on_top = closeness(jnp.linalg.norm(tgt - ref - jnp.array([0.0, 0.0, 2 * scene.CUBE_HALF])))
    stack = (stacked, {"reach": reach_cube, "lift": lift, "place": on_top, "press": zero})
    # press
    top = jnp.concatenate([button_xy, jnp.array([scene.BUTTON_TOP])])
    pressed = button_q < -scene.PRESSED_DEPTH
    press = (pressed, {"reach": closeness(jnp.linalg.norm(ee - top)), "lift": zero, "place": zero,
                       "press": jnp.clip(-button_q / scene.PRESSED_DEPTH, 0.0, 1.0)})
    options = (pick, push, stack, press)  # in FAMILIES order
    f = params["family"]
    success = jnp.stack([o[0] for o in options])[f]
    terms = {k: jnp.stack([o[1][k] for o in options])[f].astype(jnp.float32) for k in TERMS}
    return success, terms


def instruction_id(params, colors: jax.Array, paraphrase: jax.Array | int = 0) -> jax.Array:
    """int32 index into `TaskSpec.instructions()` for palette indices `colors` `[4]` worded by
    `paraphrase` (0 = the training template, k = the k-th held-out paraphrase; may be traced)."""
    n = len(scene.PALETTE)
    base = colors[params["target"]] * n * n + colors[params["ref"]] * n + colors[3]
    return (base + paraphrase * NUM_INSTRUCTIONS).astype(jnp.int32)
