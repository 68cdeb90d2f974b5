"""The asynchronous pipeline: lanes, staleness-paced buffer, dynamic batching, weights, placement.

See `docs/async.md` for the design and how to tune it from the two idle ratios.
"""

from vlajax.pipeline.buffer import Ticket, Trajectory, TrajectoryBuffer, window_samples
from vlajax.pipeline.lanes import Lane, LaneGroup, LaneStalled, Lifetime, PipelineStopped, PipelineTimeout
from vlajax.pipeline.latency import LatencyModel, with_latency
from vlajax.pipeline.metrics import Timeline, WindowReporter, summarize
from vlajax.pipeline.placement import Placement, make_placement
from vlajax.pipeline.runner import AsyncRunner, RunnerCounters, run_sync
from vlajax.pipeline.scheduler import DynamicBatcher, Request, Router
from vlajax.pipeline.slots import SlotRollout, VersionGate
from vlajax.pipeline.weights import ParamServer

__all__ = [
    "AsyncRunner", "DynamicBatcher", "Lane", "LaneGroup", "LaneStalled", "LatencyModel", "Lifetime", "ParamServer",
    "PipelineStopped", "PipelineTimeout", "Placement", "Request", "Router", "RunnerCounters", "SlotRollout",
    "Ticket", "Timeline", "Trajectory", "TrajectoryBuffer", "VersionGate", "WindowReporter", "make_placement",
    "run_sync", "summarize", "window_samples", "with_latency",
]
