"""Evaluation of a policy: closed loop in the simulator (`closed_loop`), per perturbation
axis and level (`robustness`), and against a policy server (`remote`)."""
