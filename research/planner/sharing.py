"""The shared compute of the planner's model (`research.planner.sim`): a processor-sharing server in SimPy.

    dev = Shared(env, capacity=2.0, caps={"step": 1.0})
    yield dev.run(work_s, cores=1.0, group="step")    # fires when `work_s` solo-seconds are done
"""

from __future__ import annotations

import simpy

__all__ = ["Shared"]


class Shared:
    """A processor-sharing server of `capacity` cores: `run(work, cores, group)` -> event that fires when
    `work` solo-seconds are done. A job keeps `cores` cores busy when alone (clipped to the
    capacity); the capacity is shared max-min fairly (water-filling: no job gets more than it
    uses, what a small job leaves goes to the others) and a job given a of its c cores advances
    at a / c of its solo speed. capacity 1 and one core per job: k jobs each advance at 1/k.

    `caps`: group -> G, the most solo-speed units that two or more concurrent jobs of that group
    advance at together (their rates summed; `Costs.concurrency`: measured with the calls in
    threads, what serializes them beyond the cores -- Python's GIL, locks -- included). The group's
    jobs share G max-min fairly in rates, and the cores they then leave go to the other jobs.
    Without caps (or one job of a group in flight) this is the plain core sharing above. `fifo`: what a
    group's jobs get together (cores, and rate under a cap) goes to them first come, first served
    (the oldest at up to its solo speed, the next takes what is left, ...) instead of equally:
    concurrent jobs of a group then finish one after another.

    `group_cores` (issue 44.5, fifth try): while two or more jobs of a capped group are in flight, each
    demands at most capacity / G cores per solo-speed unit (not its solo cores), so the group alone on
    the host reaches the G it was measured at. Without it the cores are water-filled first: 4 jobs of
    1.4 solo cores on 2 cores advance at 2 / 1.4 = 1.43 units together even where G = 1.9 was
    measured for exactly them (a call's CPU seconds alone -- an intra-op pool on both cores -- overstate
    what it needs beside others)."""

    def __init__(self, env: simpy.Environment, capacity: float = 1.0, caps: dict[str, float] | None = None,
                 fifo: bool = False, group_cores: bool = False):
        self.env, self.capacity, self.jobs, self.last = env, float(capacity), [], 0.0
        self.caps = {g: max(float(v), 1e-3) for g, v in (caps or {}).items()}
        self.fifo = fifo  # a capped group's jobs served first come, first served (else: an equal share each)
        self.group_cores = group_cores  # concurrent capped jobs' cores bounded by capacity / their cap
        self.kick = env.event()
        self._rates_now: list[float] | None = None  # the jobs' rates, computed once per change of the jobs in flight
        env.process(self._serve())

    def _cores(self) -> list[float]:
        """Each job's cores per solo-speed unit: its solo cores, or with `group_cores` and two or more
        of its capped group in flight at most capacity / the group's cap."""
        cores = [j[2] for j in self.jobs]
        if self.group_cores:
            for g, cap in self.caps.items():
                members = [i for i, j in enumerate(self.jobs) if j[3] == g]
                if len(members) >= 2:
                    for i in members:
                        cores[i] = min(cores[i], self.capacity / cap)
        return cores

    def _share(self, limit: list[float], cores: list[float]) -> list[float]:
        """Rates from water-filling the cores over the jobs' demands (cores x their rate limit)."""
        demand = [c * m for c, m in zip(cores, limit)]
        cap, left, rates = self.capacity, len(demand), [0.0] * len(demand)
        for i in sorted(range(len(demand)), key=lambda i: demand[i]):
            a = min(demand[i], cap / left)
            cap, left = cap - a, left - 1
            rates[i] = a / cores[i]
        return rates

    def _rates(self) -> list[float]:
        limit, cores = [1.0] * len(self.jobs), self._cores()
        for _ in range(100):  # the caps only lower limits: a few rounds settle
            rates, lowered = self._share(limit, cores), False
            for g, cap in self.caps.items():
                members = [i for i, j in enumerate(self.jobs) if j[3] == g]
                if len(members) < 2 or sum(rates[i] for i in members) <= cap * (1 + 1e-9):
                    continue
                level, left, budget = 0.0, len(members), cap  # water-fill the group's cap over its rates
                for i in sorted(members, key=lambda i: rates[i]):
                    level = budget / left
                    if rates[i] > level:
                        break
                    budget, left = budget - rates[i], left - 1
                for i in members:
                    if rates[i] > level * (1 + 1e-12):
                        limit[i], lowered = min(limit[i], level), True
            if not lowered:
                return self._first_come(rates, cores) if self.fifo else rates
        return self._first_come(rates, cores) if self.fifo else rates

    def _first_come(self, rates: list[float], cores: list[float]) -> list[float]:
        """Each group's cores (what its jobs got above, in total) handed out first come, first served:
        the oldest job (self.jobs is in arrival order) at up to its solo speed, the next what is left.
        `cores`: each job's cores per solo-speed unit (`_cores`)."""
        for g in {j[3] for j in self.jobs if j[3] is not None}:
            members = [i for i, j in enumerate(self.jobs) if j[3] == g]
            if len(members) < 2:
                continue
            budget = sum(rates[i] * cores[i] for i in members)  # the group's cores
            speed = sum(rates[i] for i in members)  # ... and its summed rate (a cap binds it)
            for i in members:
                r = min(1.0, budget / cores[i], speed)
                rates[i] = max(r, 0.0)
                budget -= r * cores[i]
                speed -= r
        return rates

    def _current_rates(self) -> list[float]:
        """`_rates` of the jobs in flight: they depend on which jobs are in flight (their cores and groups),
        not on their work left, so they are computed once per arrival or departure."""
        if self._rates_now is None:
            self._rates_now = self._rates()
        return self._rates_now

    def _advance(self) -> None:
        if self.jobs:
            dt = self.env.now - self.last
            for j, r in zip(self.jobs, self._current_rates()):
                j[0] -= dt * r
        self.last = self.env.now

    def run(self, work: float, cores: float = 1.0, group: str | None = None) -> simpy.Event:
        self._advance()
        ev = self.env.event()
        self.jobs.append([work, ev, min(max(float(cores), 1e-3), self.capacity), group])
        self._rates_now = None
        if not self.kick.triggered:
            self.kick.succeed()
        return ev

    def _serve(self):
        while True:
            if not self.jobs:
                self.kick = self.env.event()
                yield self.kick
                continue
            self.kick = self.env.event()
            nxt = min(j[0] / r for j, r in zip(self.jobs, self._current_rates()) if r > 0)
            yield self.env.any_of([self.kick, self.env.timeout(max(nxt, 0.0))])
            self._advance()
            for j in [j for j in self.jobs if j[0] <= 1e-12]:
                self.jobs.remove(j)
                self._rates_now = None
                j[1].succeed()
