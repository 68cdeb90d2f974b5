"""Research code, outside the installed package: the discrete-event planner of the async
pipeline (`planner`, needs the `research` extra: simpy) and the research benchmarks
(`bench`). Run from a checkout: `python -m research.planner ...`,
`python -m research.bench NAME ...`."""
